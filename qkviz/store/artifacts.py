"""A derived result kept in its own directory of a run, finished by a marker written last.

``qkviz stats`` and ``qkviz related`` each write a few arrays and tables into a directory of the run
(names in :mod:`qkviz.store.files`). The marker -- a JSON file naming the schema version and the
fingerprint of the extraction the result was computed from -- is removed before the data files are
replaced and written again only after all of them, so a directory without a marker is never read as
a finished result, and a result of another extraction or qkviz version is recognised and refused. The
marker holds the sha256 of every file, checked when the result is read (once per file and process): a
file changed since is reported and the result treated as absent.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.store import files as run_files
from qkviz.store.locks import exclusive_lock
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)


class ArtifactDirectory:
    """One result directory of ``run`` (e.g. ``stats/``) whose marker carries ``schema_version``.

    ``remake`` is the command that makes the result again, named in the warnings of :meth:`read_marker`.
    """

    def __init__(self, run: StoredRun, directory: str, marker: str, schema_version: int, remake: str):
        self.run = run
        self.directory = Path(run.path) / directory
        self.marker_path = self.directory / marker
        self.schema_version = schema_version
        self.remake = remake

    def write(self, arrays: dict[str, np.ndarray | None], tables: dict[str, pd.DataFrame | None], marker: dict) -> Path:
        """Replace the result: the marker goes first, then every file is written (an array or table of ``None``
        removes that optional file), then the marker with the schema and fingerprint."""
        self.directory.mkdir(exist_ok=True)
        with exclusive_lock(self.directory.with_name(f".{self.directory.name}.lock")):   # two writers: one at a time
            return self._write(arrays, tables, marker)

    def _write(self, arrays: dict[str, np.ndarray | None], tables: dict[str, pd.DataFrame | None], marker: dict) -> Path:
        self.marker_path.unlink(missing_ok=True)
        for name, array in arrays.items():
            (self.directory / name).unlink(missing_ok=True)
            if array is not None:
                run_files.save_npy_atomic(self.directory / name, np.ascontiguousarray(array))
        for name, table in tables.items():
            (self.directory / name).unlink(missing_ok=True)
            if table is not None:
                run_files.write_parquet_atomic(table, self.directory / name)
        written = [name for name, value in (*arrays.items(), *tables.items()) if value is not None]
        run_files.write_json_atomic(self.marker_path, {
            "schema_version": self.schema_version, "run_fingerprint": self.run.manifest["fingerprint"], **marker,
            "sha256": {name: run_files.file_sha256(self.directory / name) for name in written}})
        return self.directory

    def read_marker(self) -> dict | None:
        """The marker of a finished result of this extraction and schema; ``None`` when there is none,
        and with a warning naming :attr:`remake` when it is damaged or belongs to another extraction."""
        try:
            marker = json.loads(self.marker_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            marker = {}
        if (not isinstance(marker, dict) or marker.get("schema_version") != self.schema_version
                or marker.get("run_fingerprint") != self.run.manifest["fingerprint"]):
            logger.warning("%s was made by another qkviz version or extraction; run '%s --run %s' again",
                           self.directory, self.remake, self.run.path)
            return None
        for name, expected in marker.get("sha256", {}).items():      # each file once per process
            path = self.directory / name
            if not path.exists() or not run_files.matches_checksum(path, expected):
                logger.warning("%s is damaged (%s does not match its checksum) and is not used; run '%s --run %s' again",
                               self.directory, name, self.remake, self.run.path)
                return None
        return marker

    def array(self, name: str) -> np.ndarray:
        return np.load(self.directory / name, allow_pickle=False)

    def optional_array(self, name: str) -> np.ndarray | None:
        path = self.directory / name
        return np.load(path, allow_pickle=False) if path.exists() else None

    def table(self, name: str) -> pd.DataFrame:
        return pd.read_parquet(self.directory / name)

    def optional_table(self, name: str) -> pd.DataFrame | None:
        path = self.directory / name
        return pd.read_parquet(path) if path.exists() else None

    def warn_damaged(self, error: Exception) -> None:
        logger.warning("%s is damaged (%s); run '%s --run %s' again", self.directory, error, self.remake,
                       self.run.path)
