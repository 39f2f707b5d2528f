"""The projection cache of a run: one entry per (head, alignment, method, dim, parameters).

An entry is identified by a :class:`ProjectionSpec`: the head, the method's name, the dimension, the
alignment and the method's full parameters. The methods, their parameters and defaults are declared in
the catalogue above this layer (:mod:`qkviz.projection.catalogue`), which makes the specs.

Entries live in ``<run>/projections/``: ``<key>.npy`` (float32 ``[2 * n_tokens, dim]``, queries
first) and ``<key>.json`` (what it is, and the sha256 of the array file). The key hashes the
run's fingerprint, the entry's settings and :data:`CACHE_SCHEMA_VERSION`. Both files are written
through a temporary file and renamed, the JSON last, so an entry exists only when complete; an
entry whose array is missing, truncated or altered is treated as absent and recomputed.

A layout whose computation failed leaves ``failures/<key>.json`` (what and why), removed when the
entry is stored; ``locks/l<L>-h<H>.lock`` is the per-head lock two processes projecting the same run
take, so that each head is computed once (see :mod:`qkviz.projection.tasks`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from qkviz.store import files as run_files

logger = logging.getLogger(__name__)

CACHE_SCHEMA_VERSION = 1
FAILURES_DIRECTORY = "failures"
LOCKS_DIRECTORY = "locks"
#: A layout is 2D or 3D.
DIMENSIONS = (2, 3)


@dataclass(frozen=True)
class ProjectionSpec:
    """Everything that determines one head's layout."""

    layer: int
    head: int
    method: str                   # a name of qkviz.projection.catalogue
    dim: int                      # 2 or 3
    translate_keys: bool = True
    scale_norms: bool = True
    params: tuple[tuple[str, object], ...] = field(default=())  # sorted (name, value) pairs
    #: how a layout fitted on a sample places the other tokens, where the method has versions of it (0: none);
    #: part of the key, so that entries of an older version are made again
    placement: int = 0

    @classmethod
    def of(cls, layer: int, head: int, method: str, dim: int, translate_keys: bool = True,
           scale_norms: bool = True, *, placement: int = 0, **params) -> "ProjectionSpec":
        return cls(layer, head, method, dim, translate_keys, scale_norms, tuple(sorted(params.items())), placement)

    def as_dict(self) -> dict:
        """What the entry's sidecar records (``placement`` only where there is one)."""
        described = asdict(self)
        described["params"] = dict(self.params)
        if not self.placement:
            del described["placement"]
        return described


class ProjectionCache:
    """Reads and writes the cache entries of one run."""

    def __init__(self, run_path: Path, run_fingerprint: str):
        self.directory = Path(run_path) / run_files.CACHE_DIRECTORY
        self.run_fingerprint = run_fingerprint

    def key(self, spec: ProjectionSpec) -> str:
        identity = {"schema": CACHE_SCHEMA_VERSION, "run": self.run_fingerprint, **spec.as_dict()}
        return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]

    def _paths(self, spec: ProjectionSpec) -> tuple[Path, Path]:
        key = self.key(spec)
        return self.directory / f"{key}.npy", self.directory / f"{key}.json"

    def load(self, spec: ProjectionSpec) -> np.ndarray | None:
        """The cached layout, or ``None`` when there is no complete, intact entry."""
        return np.load(self._paths(spec)[0], allow_pickle=False) if self.contains(spec) else None

    def sidecar(self, spec: ProjectionSpec) -> dict | None:
        try:
            return json.loads(self._paths(spec)[1].read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            return None

    def specs(self) -> list[ProjectionSpec]:
        """The specs of this run's entries (by their JSON; :meth:`load` still checks each array)."""
        found = []
        for sidecar_path in sorted(self.directory.glob("*.json")) if self.directory.exists() else []:
            try:
                sidecar = json.loads(sidecar_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if sidecar.get("run") != self.run_fingerprint or sidecar.get("schema") != CACHE_SCHEMA_VERSION:
                continue
            described = dict(sidecar["spec"])
            params = described.pop("params")
            spec = ProjectionSpec.of(**described, **params)
            if self.key(spec) == sidecar_path.stem:    # an entry of an older placement recorded none: not listed
                found.append(spec)
        return found

    def summary(self) -> dict[tuple[str, int, str], int]:
        """``{(method, dim, settings): number of heads}`` over the entries of this run's cache."""
        counts: dict[tuple[str, int, str], int] = {}
        for spec in self.specs():
            settings = ", ".join(f"{k} {v}" for k, v in spec.params)
            if not spec.translate_keys or not spec.scale_norms:
                settings += f", translate_keys {spec.translate_keys}, scale_norms {spec.scale_norms}"
            key = (spec.method, spec.dim, settings)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def contains(self, spec: ProjectionSpec) -> bool:
        """Whether a complete entry is there whose array matches the sha256 in its sidecar (hashed once per
        file and process, see :func:`qkviz.store.files.matches_checksum`)."""
        array_path, sidecar_path = self._paths(spec)
        try:
            expected = json.loads(sidecar_path.read_text(encoding="utf-8")).get("sha256")
            intact = isinstance(expected, str) and run_files.matches_checksum(array_path, expected)
        except (OSError, AttributeError, json.JSONDecodeError, UnicodeDecodeError):
            return False
        if not intact:
            logger.warning("projection cache entry %s is damaged; it will be recomputed", array_path.name)
        return intact

    def stored_keys(self) -> frozenset[str]:
        """The keys of every entry whose sidecar is there, from one listing of the directory (what
        :meth:`exists` asks one entry at a time)."""
        try:
            with os.scandir(self.directory) as entries:
                return frozenset(entry.name[:-5] for entry in entries if entry.name.endswith(".json"))
        except OSError:
            return frozenset()

    def exists(self, spec: ProjectionSpec) -> bool:
        """Whether the entry's sidecar (written last) is there: cheap; :meth:`load` checks its integrity."""
        return self._paths(spec)[1].exists()

    def store(self, spec: ProjectionSpec, coordinates: np.ndarray, details: dict | None = None) -> Path:
        """Write one entry: the array first, then the JSON that makes it visible."""
        coordinates = np.ascontiguousarray(coordinates, dtype=np.float32)
        if coordinates.ndim != 2 or coordinates.shape[1] != spec.dim:
            raise ValueError(f"coordinates {coordinates.shape} do not match dim {spec.dim}")
        self.directory.mkdir(parents=True, exist_ok=True)
        array_path, sidecar_path = self._paths(spec)
        run_files.save_npy_atomic(array_path, coordinates)
        sidecar = {"schema": CACHE_SCHEMA_VERSION, "run": self.run_fingerprint, "spec": spec.as_dict(),
                   "shape": list(coordinates.shape), "sha256": run_files.file_sha256(array_path),
                   **({"details": details} if details else {})}
        run_files.write_json_atomic(sidecar_path, sidecar)
        self._failure_path(spec).unlink(missing_ok=True)
        return array_path

    # -- failures and locks ---------------------------------------------------------------
    def _failure_path(self, spec: ProjectionSpec) -> Path:
        return self.directory / FAILURES_DIRECTORY / f"{self.key(spec)}.json"

    def record_failure(self, spec: ProjectionSpec, error: str) -> None:
        """Remember that ``spec`` could not be computed, and why (until it is stored)."""
        path = self._failure_path(spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        run_files.write_json_atomic(path, {"schema": CACHE_SCHEMA_VERSION, "run": self.run_fingerprint,
                                           "spec": spec.as_dict(), "error": error})

    def failures(self) -> list[tuple[ProjectionSpec, str]]:
        """``(spec, error)`` of every layout of this run whose last attempt failed, in layer / head order."""
        found = []
        directory = self.directory / FAILURES_DIRECTORY
        for path in sorted(directory.glob("*.json")) if directory.exists() else []:
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                if record.get("run") != self.run_fingerprint:
                    continue
                described = dict(record["spec"])
                params = described.pop("params")
                found.append((ProjectionSpec.of(**described, **params), str(record["error"])))
            except (OSError, KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError):
                continue
        return sorted(found, key=lambda item: (item[0].layer, item[0].head, item[0].method, item[0].dim))

    def remove_leftovers(self, specs: list[ProjectionSpec]) -> int:
        """Remove the temporary files that a writer of these entries left when it died mid-write (a killed
        worker); returns how many. Call it holding the specs' head lock, so that no live writer owns one."""
        keys, removed = {self.key(spec) for spec in specs}, 0
        for directory in (self.directory, self.directory / FAILURES_DIRECTORY):
            for path in directory.iterdir() if directory.is_dir() else []:   # .<key>.<npy|json>.<pid>.<hex>.tmp
                if path.name.startswith(".") and path.name.endswith(".tmp") and path.name[1:].split(".")[0] in keys:
                    path.unlink(missing_ok=True)
                    removed += 1
        if removed:
            logger.warning("removed %d half-written projection cache files a stopped process left", removed)
        return removed

    def head_lock(self, layer: int, head: int) -> Path:
        """The lock file of one head (see :func:`qkviz.store.locks.exclusive_lock`)."""
        return self.directory / LOCKS_DIRECTORY / f"l{layer}-h{head}.lock"
