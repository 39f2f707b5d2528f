"""Writing a run directory: streamed, resumable, atomic, manifest last.

:func:`plan_directory` decides what to do with an existing ``--out``; :class:`RunWriter`
preallocates the arrays as ``*.npy.partial``, takes chunks of contiguous tokens, checkpoints
``progress.json`` after each one is on disk, and at the end renames the arrays into place and
writes the manifest. A run is complete exactly when ``manifest.json`` exists.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.store import files as run_files
from qkviz.core.errors import IncompleteRunError, QkvizError
from qkviz.core.option_names import option
from qkviz.store.background_hashing import in_background
from qkviz.store.manifest import read_manifest

logger = logging.getLogger(__name__)


class DirectoryPlan(Enum):
    REUSE = "reuse"      # a complete run with the same fingerprint is there
    RESUME = "resume"    # an interrupted run with the same fingerprint is there
    FRESH = "fresh"      # nothing (or nothing kept) is there


def plan_directory(directory: Path, fingerprint: str, overwrite: bool) -> DirectoryPlan:
    """What to do with ``directory`` for a run identified by ``fingerprint``."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise QkvizError(f"{directory} is a file, not a directory; choose another {option('out', None)} directory")
    if not directory.exists() or not any(directory.iterdir()):
        return DirectoryPlan.FRESH
    markers = [directory / marker for marker in run_files.RUN_MARKERS if (directory / marker).exists()]
    if not markers:
        raise QkvizError(f"{directory} exists and is not a qkviz run; choose a new or empty {option('out', None)} "
                         "directory")
    if not all(run_files.is_run_marker(marker) for marker in markers):
        raise QkvizError(f"{directory} holds a {markers[0].name} that is not a qkviz run's; nothing was replaced: "
                         f"choose a new or empty {option('out', None)} directory")
    previous = _read_fingerprint(directory)
    if previous == fingerprint:
        if not (directory / run_files.MANIFEST).exists():
            return DirectoryPlan.RESUME
        try:
            manifest = read_manifest(directory)
            # Runs made before the logit parts or the output norms were captured are redone only when asked to.
            if ("logit_parts" in manifest and "output_norms" in manifest) or not overwrite:
                return DirectoryPlan.REUSE
        except IncompleteRunError:
            if not overwrite:
                raise
    elif not overwrite:
        raise QkvizError(f"{directory} holds a run made with different settings; pass {option('overwrite')} to "
                         f"replace it, or choose another {option('out', None)} directory")
    remove_run(directory)
    return DirectoryPlan.FRESH


def remove_run(directory: Path) -> None:
    """Remove what qkviz wrote in the run ``directory`` (``--overwrite``): the files and result directories the
    run format names, nothing else; anything else there is left (and logged)."""
    logger.info("removing the previous run in %s (%s)", directory, option("overwrite"))
    kept = []
    for entry in sorted(directory.iterdir()):
        if not run_files.is_run_entry(entry.name):
            kept.append(entry.name)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if kept:
        logger.warning("%s: left %d entries that are not part of a run: %s", directory, len(kept), ", ".join(kept[:5]))


def _read_fingerprint(directory: Path) -> str | None:
    for marker in run_files.RUN_MARKERS:
        path = directory / marker
        if path.exists():
            try:
                return json.loads(path.read_text(encoding="utf-8")).get("fingerprint")
            except (json.JSONDecodeError, UnicodeDecodeError, OSError):
                return None
    return None


@dataclass(frozen=True)
class StoreLayout:
    """Array shapes of one run: ``[layer, head, token, d_head]``."""

    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    n_tokens: int
    dtype: str  # "float16" or "float32"
    head_update: bool = False   # also stream run_files.HEAD_UPDATES
    output_norms: bool = False  # also stream run_files.OUTPUT_NORMS

    def streamed_specs(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """The arrays filled token range by token range, with their shapes and stored dtypes."""
        vectors = np.dtype(self.dtype)
        specs = {
            run_files.QUERIES: ((self.n_layers, self.n_heads, self.n_tokens, self.head_dim), vectors),
            run_files.KEYS: ((self.n_layers, self.n_kv_heads, self.n_tokens, self.head_dim), vectors),
            run_files.VALUE_NORMS: ((self.n_layers, self.n_kv_heads, self.n_tokens), np.dtype(np.float32)),
        }
        if self.head_update:
            specs[run_files.HEAD_UPDATES] = ((self.n_layers, self.n_heads, self.n_tokens, 2), np.dtype(np.float32))
        if self.output_norms:
            specs[run_files.OUTPUT_NORMS] = ((self.n_layers, self.n_heads, self.n_tokens), np.dtype(np.float32))
        return specs

    def array_files(self) -> tuple[str, ...]:
        """Every array file the extraction writes through ``*.partial`` files."""
        return (run_files.ARRAY_FILES + ((run_files.HEAD_UPDATES,) if self.head_update else ())
                + ((run_files.OUTPUT_NORMS,) if self.output_norms else ()))


class RunWriter:
    """Streams one run's vectors to disk in chunks of contiguous tokens."""

    def __init__(self, directory: Path, fingerprint: str, layout: StoreLayout, resume: bool):
        self.directory = Path(directory)
        self.fingerprint = fingerprint
        self.layout = layout
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tokens_done = self._resumable_tokens() if resume else 0
        create = self.tokens_done == 0
        self._writers = {
            name: run_files.NpyStreamWriter(self._partial(name), shape, dtype, token_axis=2, create=create)
            for name, (shape, dtype) in layout.streamed_specs().items()
        }
        self._offsets = None if create else self._load_offsets()
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qkviz-flush")
        self._pending: Future | None = None
        self._checksums: dict[str, Future] = {}     # the arrays' sha256, taken in the background (checksum_arrays)
        if create:
            self._write_progress()
        else:
            logger.info("resuming %s at token %d of %d", self.directory, self.tokens_done, layout.n_tokens)

    def _partial(self, name: str) -> Path:
        return self.directory / (name + run_files.PARTIAL_SUFFIX)

    def _resumable_tokens(self) -> int:
        try:
            progress = json.loads((self.directory / run_files.PROGRESS).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return 0
        if progress.get("fingerprint") != self.fingerprint or progress.get("layout") != self.layout.__dict__:
            return 0
        if not all(self._partial(name).exists() for name in self.layout.array_files()):
            return 0
        return int(progress.get("tokens_done", 0))

    def _write_progress(self) -> None:
        run_files.write_json_atomic(self.directory / run_files.PROGRESS, {
            "schema_version": run_files.SCHEMA_VERSION,
            "fingerprint": self.fingerprint,
            "layout": self.layout.__dict__,
            "tokens_done": self.tokens_done,
        })

    @property
    def offsets(self) -> dict[str, np.ndarray] | None:
        """Per-head offsets the stored vectors are relative to (see :mod:`qkviz.store.files`), once saved."""
        return self._offsets

    def _load_offsets(self) -> dict[str, np.ndarray]:
        return {name: np.load(self._partial(name)) for name in (run_files.QUERY_OFFSETS, run_files.KEY_OFFSETS)}

    def save_offsets(self, offsets: dict[str, np.ndarray]) -> None:
        """Save the offsets; before the first chunk, so that every checkpoint has them."""
        for name, array in offsets.items():
            run_files.save_npy_atomic(self._partial(name), np.asarray(array, dtype=np.float32))
        self._offsets = self._load_offsets()

    def write_chunk(self, token_start: int, queries: np.ndarray, keys: np.ndarray, value_norms: np.ndarray,
                    head_updates: np.ndarray | None = None, output_norms: np.ndarray | None = None) -> None:
        """Write encoded tokens ``[token_start, token_start + n)``: ``[layer, head, n, d_head]`` etc."""
        if self._offsets is None:
            raise RuntimeError("save_offsets must come before the first chunk")
        blocks = [(run_files.QUERIES, queries), (run_files.KEYS, keys), (run_files.VALUE_NORMS, value_norms)]
        if self.layout.head_update:
            blocks.append((run_files.HEAD_UPDATES, head_updates))
        if self.layout.output_norms:
            blocks.append((run_files.OUTPUT_NORMS, output_norms))
        for name, block in blocks:
            for layer, head in np.ndindex(*block.shape[:2]):
                self._writers[name].write_rows((layer, head), token_start, block[layer, head])

    def checkpoint(self, tokens_done: int) -> None:
        """Record that every token before ``tokens_done`` is on disk.

        The flush runs in the background while the next chunk is computed; ``progress.json``
        moves only after the flush, and the previous checkpoint is awaited before a new one."""
        self._await_checkpoint()
        self._pending = self._flusher.submit(self._flush_and_record, tokens_done)

    def _flush_and_record(self, tokens_done: int) -> None:
        for writer in self._writers.values():
            writer.sync()
        self.tokens_done = tokens_done
        self._write_progress()

    def _await_checkpoint(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def checksum_arrays(self) -> None:
        """Close the arrays, now complete, and start their sha256 in the background, so that it overlaps with what
        comes before :meth:`finish` (building the tables); :meth:`finish` collects them. Each is the hash of the file
        as it is on disk, read back (a thread: reading and hashing release the GIL)."""
        self.close()
        self._checksums = in_background({name: partial(run_files.file_sha256, self._partial(name))
                                         for name in self.layout.array_files()}, 2, "qkviz-sha256")

    def finish(self, manifest: dict, tokens: pd.DataFrame, sentences: pd.DataFrame,
               extra_arrays: dict[str, np.ndarray] | None = None) -> dict:
        """Write the tables and ``extra_arrays`` (``{file name: array}``), move the arrays into
        place, and write the manifest last."""
        self.close()
        run_files.write_parquet_atomic(tokens, self.directory / run_files.TOKENS)
        run_files.write_parquet_atomic(sentences, self.directory / run_files.SENTENCES)
        for name, array in (extra_arrays or {}).items():
            run_files.save_npy_atomic(self.directory / name, array)
        # the arrays closed before (checksum_arrays) are hashed already: the same files, under their final names now
        hashed = {name: future.result() for name, future in self._checksums.items()}
        for name in self.layout.array_files():
            os.replace(self._partial(name), self.directory / name)
        names = (*self.layout.array_files(), *(extra_arrays or {}), run_files.TOKENS, run_files.SENTENCES)
        manifest = {**manifest, "fingerprint": self.fingerprint,
                    "files": {name: (self.directory / name).stat().st_size for name in names},
                    "sha256": {name: hashed.get(name) or run_files.file_sha256(self.directory / name) for name in names}}
        run_files.write_json_atomic(self.directory / run_files.MANIFEST, manifest)
        (self.directory / run_files.PROGRESS).unlink(missing_ok=True)
        return manifest

    def close(self) -> None:
        """Wait for the last checkpoint and close the arrays (idempotent)."""
        try:
            self._await_checkpoint()
        finally:
            self._flusher.shutdown()
            for writer in self._writers.values():
                writer.close()
