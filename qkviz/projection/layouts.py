"""Reading a head's layout from the run's projection cache, by method name and settings (what ``run.projection``,
``run.plot``, the report and the app read)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from qkviz.core.errors import QkvizError
from qkviz.projection.catalogue import layout_spec, method_names, projection_method
from qkviz.projection.defaults import LAYOUT_METHOD
from qkviz.store.projections import ProjectionCache
from qkviz.store.run import StoredRun


def cached_layout(run: StoredRun, layer: int, head: int, method: str | None = None, dim: int = 2, *,
                  translate_keys: bool = True, scale_norms: bool = True, seed: int = 0, **params) -> np.ndarray:
    """``[2 * n_tokens, dim]`` float32 layout of the head's queries (first) and keys, from the cache.

    ``method`` None is :func:`default_method`. A layout not in the cache is a
    :class:`QkvizError` naming the command that makes it."""
    run.check_head(layer, head)
    method = default_method(run, layer, head, dim) if method is None else method
    spec = layout_spec(layer, head, method, dim, translate_keys=translate_keys, scale_norms=scale_norms, seed=seed,
                       params=params)
    coordinates = ProjectionCache(run.path, run.manifest["fingerprint"]).load(spec)
    if coordinates is None:
        raise QkvizError(f"no {method} {dim}D projection of layer {layer} head {head} with these settings; "
                         f"make it with 'qkviz project --run {run.path} --method {method} --dim {dim} "
                         f"--layers {layer} --heads {head}'")
    return coordinates


def layout_file(run: StoredRun, layer: int, head: int, method: str, dim: int = 2) -> tuple[str, Path]:
    """The default-settings layout's cache key and the ``.npy`` file that holds it (which may not exist yet)."""
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    key = cache.key(layout_spec(layer, head, method, dim))
    return key, cache.directory / f"{key}.npy"


def has_layout(run: StoredRun, layer: int, head: int, method: str, dim: int = 2) -> bool:
    """Whether the head's default-settings layout is cached (cheap: the entry's sidecar; loading checks it)."""
    return ProjectionCache(run.path, run.manifest["fingerprint"]).exists(layout_spec(layer, head, method, dim))


def layout_counts(run: StoredRun) -> dict[tuple[str, int], int]:
    """``{(method, dim): number of heads whose default-settings layout is cached}`` for every method of the
    catalogue and each dimension it makes: one listing of the cache against every head's key (the keys made once
    per run; 1,024 heads x 10 layouts took 1 s asked one file at a time)."""
    fingerprint = run.manifest["fingerprint"]
    stored = ProjectionCache(run.path, fingerprint).stored_keys()
    return {(method, dim): len(stored.intersection(_default_keys(str(run.path), fingerprint, run.n_layers,
                                                                 run.n_heads, method, dim)))
            for method in method_names() for dim in projection_method(method).dims}


@functools.lru_cache(maxsize=64)
def _default_keys(path: str, fingerprint: str, n_layers: int, n_heads: int, method: str, dim: int) -> frozenset[str]:
    """The cache keys of every head's default-settings ``method`` layout in ``dim`` dimensions."""
    cache = ProjectionCache(Path(path), fingerprint)
    return frozenset(cache.key(layout_spec(layer, head, method, dim))
                     for layer in range(n_layers) for head in range(n_heads))


def layout_failures(run: StoredRun) -> dict[tuple[int, int, str, int], str]:
    """``{(layer, head, method, dim): error}`` of the default-settings layouts whose last attempt failed."""
    failures = {}
    for spec, error in ProjectionCache(run.path, run.manifest["fingerprint"]).failures():
        try:
            if spec == layout_spec(spec.layer, spec.head, spec.method, spec.dim):
                failures[(spec.layer, spec.head, spec.method, spec.dim)] = error
        except QkvizError:      # a method no longer in the catalogue, or a dimension it does not make
            continue
    return failures


def best_cached_method(run: StoredRun, layer: int, head: int, dim: int = 2) -> str | None:
    """The most faithful method whose ``dim``-D layout of the head, in default settings, is cached; None: none is."""
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    for method in method_names():
        try:
            spec = layout_spec(layer, head, method, dim)
        except QkvizError:          # a method that makes no layout of this dimension
            continue
        if cache.exists(spec):
            return method
    return None


def default_method(run: StoredRun, layer: int, head: int, dim: int = 2) -> str:
    """The layout a head is shown in when no method is named: the most faithful one it has cached in default settings
    (:func:`best_cached_method`), else the layout a run is meant to be read in (:data:`LAYOUT_METHOD`)."""
    return best_cached_method(run, layer, head, dim) or LAYOUT_METHOD
