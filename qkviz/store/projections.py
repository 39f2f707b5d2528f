"""The projection cache of a run: one entry per (head, alignment, method, dim, parameters).

What identifies a layout is declared here too: the method names, dimensions and each method's
default parameters (a cache key holds the full parameters, so reading a layout needs them); the
methods themselves are implemented in :mod:`qkviz.projection.methods`.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.store import files as run_files

logger = logging.getLogger(__name__)

CACHE_SCHEMA_VERSION = 1
#: How a 2D attn-tsne layout fitted on a sample places the other tokens, part of its key (older entries are
#: computed again): 2 -- placed at their sampled partners' weighted mean, then the whole head polished over its
#: attention graph (:mod:`qkviz.projection.sampling`); entries without it placed them by openTSNE's transform.
SAMPLED_PLACEMENT_VERSION = 2
FAILURES_DIRECTORY = "failures"
LOCKS_DIRECTORY = "locks"


# -- what identifies a layout: the methods, their dimensions and default parameters ----------
# (the implementations are in qkviz.projection.methods; a cache entry's key holds the full parameters)
METHODS = ("pca", "umap", "tsne", "attn-tsne", "attn-umap")
#: Methods whose neighbour graph is the head's attention (qkviz.projection.attention_graph).
ATTENTION_METHODS = ("attn-tsne", "attn-umap")
#: Neighbour distances UMAP and t-SNE can use.
METRICS = ("euclidean", "cosine")
#: UMAP's starting layouts: ``pca`` (the points' principal components, scaled as UMAP scales its own), or
#: ``spectral`` (UMAP's own default, the graph Laplacian's eigenvectors; it can fail and fall back to random).
UMAP_INITS = ("pca", "spectral")
DIMENSIONS = (2, 3)
#: Tokens a t-SNE or UMAP layout is fitted on when a head has more: the others are placed on the fitted
#: picture (qkviz.projection.sampling; what it costs in faithfulness: bench/scale.py). 0 fits every token.
DEFAULT_SAMPLE = 20_000
#: attn-tsne's: its sampled layout is polished over the whole head's attention graph, and on MiniLM heads at
#: 100,000 tokens a 10,000-token sample then scored as well as a 20,000-token one, in less time (bench/scale.py)
ATTENTION_TSNE_SAMPLE = 10_000
DEFAULT_PARAMS: dict[str, dict] = {
    "pca": {},
    # init pca: umap's spectral start fails on layer-0 heads; 20 negative samples (umap: 5) raised
    # trustworthiness on bench/faithful.py's heads, 0.889 -> 0.910 (MiniLM), 0.929 -> 0.945 (SmolLM2).
    "umap": {"n_neighbors": 15, "min_dist": 0.0, "n_epochs": 200, "metric": "cosine", "init": "pca",
             "negative_sample_rate": 20, "sample": DEFAULT_SAMPLE},
    "tsne": {"perplexity": 30.0, "early_exaggeration_iter": 125, "n_iter": 125, "metric": "cosine",
             "n_iter_3d": 50, "sample": DEFAULT_SAMPLE},
    # From bench/faithful.py's sweep (4 MiniLM heads, 2 of them sink heads): any key_cap lowers partner
    # recall (q->k 0.26 uncapped, 0.10 at 5, 0.05 at 2) for at most +0.016 trustworthiness, which alpha
    # buys more cheaply; temperatures above 1 and k = 20 lower recall; k = 5 is no better than 10.
    "attn-tsne": {"k": 10, "alpha": 0.5, "temperature": 1.0, "same_kind_k": 10, "key_cap": float("inf"),
                  "hide_first_token": False, "early_exaggeration_iter": 125, "n_iter": 125, "n_iter_3d": 50,
                  "sample": ATTENTION_TSNE_SAMPLE},
    "attn-umap": {"k": 10, "alpha": 1.0, "temperature": 1.0, "same_kind_k": 10, "key_cap": float("inf"),
                  "hide_first_token": False, "min_dist": 0.0, "n_epochs": 200, "sample": DEFAULT_SAMPLE},
}
#: Parameters that only a 3D layout reads (left out of 2D specs, so they do not split the cache).
ONLY_3D = {"tsne": ("n_iter_3d",), "attn-tsne": ("n_iter_3d",)}


def check_method(method: str, dim: int) -> None:
    if method not in METHODS:
        raise QkvizError(f"unknown projection method {method!r}; choose from {', '.join(METHODS)}")
    if dim not in DIMENSIONS:
        raise QkvizError(f"unknown dimension {dim}; choose 2 or 3")


def resolve_params(method: str, params: dict, dim: int = 3) -> dict:
    """The method's defaults overridden by ``params``; unknown names and metrics are refused."""
    unknown = set(params) - set(DEFAULT_PARAMS[method])
    if unknown:
        raise QkvizError(f"{method} has no parameter {', '.join(sorted(unknown))}; "
                         f"it takes {', '.join(DEFAULT_PARAMS[method]) or 'none'}")
    resolved = {**DEFAULT_PARAMS[method], **params}
    for name, default in DEFAULT_PARAMS[method].items():
        if isinstance(default, bool):   # one spelling per value in the cache key: a Python bool
            if not isinstance(resolved[name], (bool, np.bool_)):
                raise QkvizError(f"{method}'s {name} must be true or false, got {resolved[name]!r}")
            resolved[name] = bool(resolved[name])
    if dim == 2:
        for name in ONLY_3D.get(method, ()):
            resolved.pop(name, None)
    if "metric" in resolved and resolved["metric"] not in METRICS:
        raise QkvizError(f"metric {resolved['metric']!r} is not one of {', '.join(METRICS)}")
    if "init" in resolved and resolved["init"] not in UMAP_INITS:
        raise QkvizError(f"init {resolved['init']!r} is not one of {', '.join(UMAP_INITS)}")
    for name, value in resolved.items():
        if name in PARAM_RANGES:
            _check_range(method, name, value, *PARAM_RANGES[name])
    return resolved


#: ``name: (kind, lowest, lowest excluded)`` of the numeric parameters (the attention graph's own are checked
#: against the head's size by :func:`qkviz.projection.attention_graph.check_graph_params`)
PARAM_RANGES = {
    "perplexity": ("real", 0.0, True), "early_exaggeration_iter": ("whole", 0, False), "n_iter": ("whole", 1, False),
    "n_iter_3d": ("whole", 1, False), "n_neighbors": ("whole", 2, False), "min_dist": ("real", 0.0, False),
    "n_epochs": ("whole", 1, False), "negative_sample_rate": ("whole", 1, False), "sample": ("whole", 0, False),
}


def _check_range(method: str, name: str, value, kind: str, lowest, excluded: bool) -> None:
    """A one-line QkvizError for a value of the wrong kind, not finite, or below its range."""
    whole = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    number = whole or (isinstance(value, (float, np.floating)) and np.isfinite(value))
    if (kind == "whole" and not whole) or not number or value < lowest or (excluded and value == lowest):
        wanted = "a whole number" if kind == "whole" else "a finite number"
        bound = f"above {lowest}" if excluded else f">= {lowest}"
        raise QkvizError(f"{method}'s {name} must be {wanted} {bound}, got {value!r}")


@dataclass(frozen=True)
class ProjectionSpec:
    """Everything that determines one head's layout."""

    layer: int
    head: int
    method: str                   # "pca", "umap" or "tsne"
    dim: int                      # 2 or 3
    translate_keys: bool = True
    scale_norms: bool = True
    params: tuple[tuple[str, object], ...] = field(default=())  # sorted (name, value) pairs

    @classmethod
    def of(cls, layer: int, head: int, method: str, dim: int, translate_keys: bool = True,
           scale_norms: bool = True, **params) -> "ProjectionSpec":
        return cls(layer, head, method, dim, translate_keys, scale_norms, tuple(sorted(params.items())))

    def as_dict(self) -> dict:
        described = asdict(self)
        described["params"] = dict(self.params)
        return described


class ProjectionCache:
    """Reads and writes the cache entries of one run."""

    def __init__(self, run_path: Path, run_fingerprint: str):
        self.directory = Path(run_path) / run_files.CACHE_DIRECTORY
        self.run_fingerprint = run_fingerprint

    def key(self, spec: ProjectionSpec) -> str:
        identity = {"schema": CACHE_SCHEMA_VERSION, "run": self.run_fingerprint, **spec.as_dict()}
        if spec.method == "attn-tsne" and spec.dim == 2 and dict(spec.params).get("sample", 0) > 0:
            identity["placement"] = SAMPLED_PLACEMENT_VERSION
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
            found.append(ProjectionSpec.of(**described, **params))
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
