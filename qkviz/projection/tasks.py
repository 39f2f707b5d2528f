"""Projecting many heads: one pure task per head, run through a small executor seam.

:func:`project_head` is a pure function of (run path, one head's specs) that leaves cache entries
behind; it opens the run itself and reads only that head's memory-mapped vectors, so workers stay
small.
:func:`run_tasks` hands the tasks to a local process pool (persistent: numba compiles once per
worker, not once per head) or to a :class:`HeadExecutor` -- a Dask cluster
(:mod:`qkviz.projection.dask_executor`) runs the very same :func:`project_head`, so a distributed
engine needs no change to the algorithms.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Executor, as_completed
from dataclasses import dataclass
from functools import partial
from typing import Iterable, Iterator, Protocol, runtime_checkable

import numpy as np

from qkviz.cluster import local_pool, start_quiet_worker
from qkviz.core.alignment import Alignment, align_head
from qkviz.core.errors import QkvizError
from qkviz.store.locks import LockBusy, exclusive_lock
from qkviz.store.projections import ATTENTION_METHODS, ONLY_3D, ProjectionCache, ProjectionSpec, check_method, resolve_params
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.projection.attention_graph import GRAPH_PARAMS, AttentionGraph, attention_graph, check_graph_params
from qkviz.projection.methods import neighbors_needed, project_points
from qkviz.projection.sampling import (assemble, attention_affinities, perplexity_affinities, place, polish_tsne,
                                       refine_tsne, sample_points, spread_over_graph, stratified_sample)
from qkviz.store.run import StoredRun, open_stored_run

logger = logging.getLogger(__name__)


def plan_specs(run: StoredRun, methods: Iterable[str], dims: Iterable[int], layers: Iterable[int],
               heads: Iterable[int], alignment: Alignment = Alignment(), seed: int = 0,
               params: dict[str, dict] | None = None) -> list[ProjectionSpec]:
    """One spec per (layer, head, method, dim), with each method's full parameters and the seed."""
    specs = []
    for method in methods:
        for dim in dims:
            check_method(method, dim)
            asked = (params or {}).get(method, {})
            used = {**resolve_params(method, asked, dim), "seed": seed}
            if asked.get("sample", 0) > run.n_tokens:   # the default may exceed a small run: it then fits all
                raise QkvizError(f"a sample of {asked['sample']} tokens is more than the run's {run.n_tokens}; "
                                 f"ask for at most {run.n_tokens}, or 0 to fit every token")
            fitted = used["sample"] if 0 < used.get("sample", 0) < run.n_tokens else run.n_tokens
            if method in ATTENTION_METHODS:   # refused before any work starts, not inside a worker
                check_graph_params(fitted, **{name: used[name] for name in GRAPH_PARAMS})
            for layer in layers:
                for head in heads:
                    run.check_head(layer, head)
                    specs.append(ProjectionSpec.of(layer, head, method, dim, alignment.translate_keys,
                                                   alignment.scale_norms, **used))
    return specs


def head_groups(specs: list[ProjectionSpec]) -> list[list[ProjectionSpec]]:
    """Specs grouped by (layer, head, alignment): one task each, sharing the data and neighbours."""
    groups: dict[tuple, list[ProjectionSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.layer, spec.head, spec.translate_keys, spec.scale_norms), []).append(spec)
    return list(groups.values())


def project_head(run_path: str, specs: list[ProjectionSpec], wait: bool = True) -> list[dict]:
    """Compute and cache the layouts of one head that are not cached yet; report each one.

    The head's lock is held meanwhile, so two processes projecting the same run compute each head once;
    with ``wait=False`` a head another process holds is reported ``busy`` instead (to be tried again
    later). A layout that fails is recorded in the cache (shown by ``qkviz status`` and the app) and
    reported with its ``error``; the head's other layouts go on. An ``OSError`` (permission, a full disk)
    is raised instead: it is the file system's, and every head would meet it."""
    run = open_stored_run(run_path)
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    try:
        with exclusive_lock(cache.head_lock(specs[0].layer, specs[0].head), wait=wait):
            cache.remove_leftovers(specs)     # what an earlier attempt killed mid-write left (its lock died with it)
            return _project_head(run, cache, specs)
    except LockBusy:
        return [{"spec": spec, "busy": True} for spec in specs]


def _project_head(run: StoredRun, cache: ProjectionCache, specs: list[ProjectionSpec]) -> list[dict]:
    """The work of :func:`project_head` (the head is aligned once; the layouts fitted on the same tokens share
    them, and one neighbour graph per metric serves all their UMAP and t-SNE layouts)."""
    cached = {spec for spec in specs if cache.contains(spec)}
    todo = [spec for spec in specs if spec not in cached]
    outcomes = [{"spec": spec, "cached": True, "seconds": 0.0} for spec in cached]
    if not todo:
        return outcomes
    first = todo[0]
    try:
        queries, keys = run.queries(first.layer, first.head), run.keys(first.layer, first.head)
        if not (np.isfinite(queries).all() and np.isfinite(keys).all()):
            raise QkvizError("the head's stored queries or keys are not all finite (overflow or damage); extract "
                             "the run again, with --dtype float32 if it was float16")
        aligned = align_head(queries, keys, Alignment(first.translate_keys, first.scale_norms))
    except OSError:            # the file system (permission, a full disk): every head would fail alike
        raise
    except Exception as error:  # noqa: BLE001 -- recorded on the head's layouts; the other heads go on
        return outcomes + [_failed(cache, spec, error) for spec in todo]
    by_fit: dict[tuple[int, int], list[ProjectionSpec]] = {}
    for spec in todo:
        by_fit.setdefault(_fitted_on(spec, run.n_tokens), []).append(spec)
    for (sample, seed), group in by_fit.items():
        try:
            fit = FitPoints.of(run, queries, keys, aligned.points, sample, seed)
            graphs: dict[str, NeighborGraph] = {}
            for metric in {dict(spec.params).get("metric") for spec in group} - {None}:
                needed = max(neighbors_needed(spec.method, dict(spec.params), len(fit.points))
                             for spec in group if dict(spec.params).get("metric") == metric)
                graphs[metric] = neighbor_graph(fit.points, needed, metric)
        except OSError:
            raise
        except Exception as error:  # noqa: BLE001 -- as above
            outcomes += [_failed(cache, spec, error) for spec in group]
            continue
        attention_graphs: dict[tuple, AttentionGraph] = {}
        for spec in sorted(group, key=lambda spec: spec.dim):  # a 2D t-SNE first: the 3D one starts from it
            try:
                outcomes.append(_project_one(run, cache, spec, fit, aligned, graphs, attention_graphs))
            except OSError:
                raise
            except Exception as error:  # noqa: BLE001 -- as above
                outcomes.append(_failed(cache, spec, error))
    return outcomes


def _fitted_on(spec: ProjectionSpec, n_tokens: int) -> tuple[int, int]:
    """(tokens sampled, seed) of the points ``spec``'s layout is fitted on; (0, 0): every token."""
    params = dict(spec.params)
    sample = int(params.get("sample", 0))
    return (sample, int(params["seed"])) if 0 < sample < n_tokens else (0, 0)


@dataclass(frozen=True)
class FitPoints:
    """The tokens a head's layout is fitted on: all of them, or a stratified sample (``chosen``)."""

    queries: np.ndarray
    keys: np.ndarray
    points: np.ndarray              # aligned [2s, d]: the chosen queries, then their keys
    first_tokens: np.ndarray        # fit-point token indices of the sentences' first tokens
    chosen: np.ndarray | None       # int64 token indices of the sample; None: every token
    head_queries: np.ndarray        # the whole head's (the same as queries and keys without a sample)
    head_keys: np.ndarray
    head_first_tokens: np.ndarray   # token indices of the sentences' first tokens (first_tokens without a sample)

    @classmethod
    def of(cls, run: StoredRun, queries: np.ndarray, keys: np.ndarray, aligned: np.ndarray, sample: int,
           seed: int) -> "FitPoints":
        positions = run.tokens["position"].to_numpy()
        first = np.flatnonzero(positions == 0)
        if not sample:
            return cls(queries, keys, aligned, first, None, queries, keys, first)
        chosen = _token_sample(run, sample, seed)
        return cls(np.asarray(queries[chosen]), np.asarray(keys[chosen]), aligned[sample_points(chosen, len(queries))],
                   np.flatnonzero(positions[chosen] == 0), chosen, queries, keys, first)


#: (run fingerprint, size, seed) -> the stratified sample: the same for every head of a run, drawn once per process
_SAMPLES: dict[tuple[str, int, int], np.ndarray] = {}


def _token_sample(run: StoredRun, size: int, seed: int) -> np.ndarray:
    key = (run.manifest["fingerprint"], size, seed)
    if key not in _SAMPLES:
        _SAMPLES.clear()                 # one run at a time: keep only its sample
        _SAMPLES[key] = stratified_sample(run.tokens, size, seed)
    return _SAMPLES[key]


def _project_one(run: StoredRun, cache: ProjectionCache, spec: ProjectionSpec, fit: FitPoints, aligned,
                 graphs: dict, attention_graphs: dict) -> dict:
    started = time.perf_counter()
    params = dict(spec.params)
    seed = params.pop("seed")
    tsne_2d = cache.load(_tsne_2d_spec(spec)) if spec.method in ONLY_3D and spec.dim == 3 else None
    if tsne_2d is not None and fit.chosen is not None:
        tsne_2d = tsne_2d[sample_points(fit.chosen, run.n_tokens)]
    attention = None
    if spec.method in ATTENTION_METHODS:
        graph_params = {name: params[name] for name in GRAPH_PARAMS}
        key = tuple(sorted(graph_params.items()))
        if key not in attention_graphs:
            attention_graphs[key] = attention_graph(
                fit.queries, fit.keys, fit.points, run.scale(spec.layer), softcap=run.softcap(spec.layer),
                first_tokens=fit.first_tokens, approximate=fit.chosen is not None, **graph_params)
        attention = attention_graphs[key]
    projection = project_points(fit.points, spec.method, spec.dim, seed=seed,
                                graph=graphs.get(params.get("metric")), tsne_2d=tsne_2d, attention=attention,
                                **params)
    coordinates = projection.coordinates
    if fit.chosen is not None:
        coordinates = _place_rest(run, spec, params, fit, aligned.points, projection, seed)
    seconds = time.perf_counter() - started
    cache.store(spec, coordinates, details={
        "seconds": round(seconds, 3), "norm_scale": aligned.norm_scale,
        "fitted_tokens": run.n_tokens if fit.chosen is None else len(fit.chosen),
        "adjusted": {name: list(pair) for name, pair in projection.adjusted.items()}})
    return {"spec": spec, "cached": False, "seconds": seconds, "adjusted": projection.adjusted}


def _place_rest(run: StoredRun, spec: ProjectionSpec, params: dict, fit: FitPoints, aligned: np.ndarray,
                projection, seed: int) -> np.ndarray:
    """The whole head's coordinates from the fitted sample's (:mod:`qkviz.projection.sampling`): a 2D attn-tsne
    layout spread over the whole head's attention graph and polished on it; the others placed by their
    affinities to the sample."""
    n = run.n_tokens
    if spec.method == "attn-tsne" and spec.dim == 2:
        graph = attention_graph(fit.head_queries, fit.head_keys, aligned, run.scale(spec.layer),
                                softcap=run.softcap(spec.layer), approximate=True,
                                first_tokens=fit.head_first_tokens,
                                **{name: params[name] for name in GRAPH_PARAMS})
        start = spread_over_graph(graph.matrix, projection.coordinates, sample_points(fit.chosen, n))
        return polish_tsne(start, graph, seed)
    rest = np.setdiff1d(np.arange(n), fit.chosen)
    if spec.method in ATTENTION_METHODS:
        affinities = attention_affinities(
            fit.head_queries, fit.head_keys, aligned, fit.chosen, run.scale(spec.layer),
            softcap=run.softcap(spec.layer), hidden_keys=fit.first_tokens if params["hide_first_token"] else None,
            **{name: params[name] for name in ("k", "alpha", "temperature", "same_kind_k")})
    else:
        affinities = perplexity_affinities(aligned[np.concatenate([rest, n + rest])], fit.points)
    placed = place(affinities, projection.coordinates)
    if projection.reference is not None:
        placed = refine_tsne(projection.reference, affinities, placed)
    return assemble(projection.coordinates, placed, fit.chosen, n)


def _failed(cache: ProjectionCache, spec: ProjectionSpec, error: Exception) -> dict:
    message = str(error) if isinstance(error, QkvizError) else f"{type(error).__name__}: {error}"
    logger.error("layer %d head %d %s %dD failed: %s", spec.layer, spec.head, spec.method, spec.dim, message,
                 exc_info=not isinstance(error, QkvizError))
    cache.record_failure(spec, message)
    return {"spec": spec, "cached": False, "seconds": 0.0, "error": message}


def _tsne_2d_spec(spec: ProjectionSpec) -> ProjectionSpec:
    """The 2D spec a 3D (attention) t-SNE spec starts from."""
    params = {name: value for name, value in spec.params if name not in ONLY_3D[spec.method]}
    return ProjectionSpec.of(spec.layer, spec.head, spec.method, 2, spec.translate_keys, spec.scale_norms, **params)


def start_worker(compile_umap: bool, niceness: int = 0) -> None:
    """Worker start-up (:func:`qkviz.cluster.start_quiet_worker`: Ctrl-C left to the parent, ended with it, one
    BLAS thread, ``niceness``), and UMAP's numba code compiled once if needed."""
    import warnings

    import numpy as np

    start_quiet_worker(niceness)
    if not compile_umap:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        project_points(np.random.default_rng(0).normal(size=(64, 4)), "umap", 2, n_epochs=10)


def local_executor(jobs: int, compile_umap: bool = True) -> Executor | None:
    """A persistent pool of ``jobs`` worker processes (spawned: no state forked from the parent);
    ``None`` for one job, which runs the tasks in this process."""
    if jobs <= 1:
        return None
    return local_pool(jobs, initializer=start_worker, initargs=(compile_umap,))


def run_tasks(run: StoredRun, specs: list[ProjectionSpec], executor: Executor | HeadExecutor | None) -> Iterator[dict]:
    """Submit one task per head with layouts not yet cached (or run them here when ``executor`` is
    ``None``); yield each layout's outcome as its head finishes.

    ``executor`` is a :class:`concurrent.futures.Executor` (the local pool) or a :class:`HeadExecutor`
    (a Dask cluster, :mod:`qkviz.projection.dask_executor`). A head another process is projecting is
    skipped at first and waited for at the end (then read from the cache, or computed if that process
    did not finish it)."""
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    todo = []
    for spec in specs:
        if cache.contains(spec):
            yield {"spec": spec, "cached": True, "seconds": 0.0}
        else:
            todo.append(spec)
    busy: list[list[ProjectionSpec]] = []
    if executor is None:
        for group in head_groups(todo):
            yield from _sorted_out(project_head(str(run.path), group, wait=False), busy)
        for group in busy:
            yield from project_head(str(run.path), group)
        return
    project_heads = executor.project_heads if isinstance(executor, HeadExecutor) else partial(_pool_heads, executor)
    for outcomes in project_heads(str(run.path), head_groups(todo), False):
        yield from _sorted_out(outcomes, busy)
    for outcomes in project_heads(str(run.path), busy, True):
        yield from outcomes


@runtime_checkable
class HeadExecutor(Protocol):
    """Runs :func:`project_head` on many heads elsewhere (a cluster) and yields each head's outcomes as it
    finishes, cancelling what is left if the caller stops early."""

    def project_heads(self, run_path: str, groups: list[list[ProjectionSpec]], wait: bool) -> Iterator[list[dict]]:
        ...


def _pool_heads(executor: Executor, run_path: str, groups: list[list[ProjectionSpec]],
                wait: bool) -> Iterator[list[dict]]:
    """:meth:`HeadExecutor.project_heads` on a :class:`concurrent.futures.Executor`."""
    futures = [executor.submit(project_head, run_path, group, wait) for group in groups]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        for future in futures:
            future.cancel()


def _sorted_out(outcomes: list[dict], busy: list[list[ProjectionSpec]]) -> list[dict]:
    """The outcomes to report now; a busy head's specs are added to ``busy`` instead."""
    waiting = [outcome["spec"] for outcome in outcomes if outcome.get("busy")]
    if waiting:
        busy.append(waiting)
    return [outcome for outcome in outcomes if not outcome.get("busy")]
