"""The run format: the files of a run directory (named in :mod:`qkviz.store.files` only), reading a
complete run (:class:`StoredRun`), writing one (streamed, resumable, manifest last), the projection
cache, results kept in a run with a marker written last, and advisory locks against two writers.
"""

from qkviz.store.artifacts import ArtifactDirectory
from qkviz.store.locks import LockBusy, exclusive_lock
from qkviz.store.projections import DIMENSIONS, ProjectionCache, ProjectionSpec
from qkviz.store.manifest import read_manifest
from qkviz.store.run import SENTENCE_COLUMNS, TOKEN_COLUMNS, WEIGHTINGS, StoredRun, as_run
from qkviz.store.run_writer import RunWriter
from qkviz.store.files import CACHE_DIRECTORY, RUN_DIRECTORIES

__all__ = ["DIMENSIONS", "SENTENCE_COLUMNS", "TOKEN_COLUMNS", "ArtifactDirectory", "LockBusy", "ProjectionCache",
           "ProjectionSpec", "RunWriter", "StoredRun", "WEIGHTINGS", "as_run", "exclusive_lock", "read_manifest",
           "CACHE_DIRECTORY", "RUN_DIRECTORIES"]
