"""Projecting many heads: one pure task per head, run by the one per-head executor, :class:`qkviz.cluster.HeadRunner`.

:func:`project_head` is a pure function of (run path, one head's specs) that leaves cache entries
behind; it opens the run itself and reads only that head's memory-mapped vectors, so workers stay
small.
:func:`run_tasks` hands the tasks to a :class:`~qkviz.cluster.HeadRunner` made by :func:`projection_runner`: this
process, a persistent local process pool (numba compiles once per worker, not once per head) or a Dask cluster,
which runs the very same :func:`project_head`, so a distributed engine needs no change to the algorithms.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

import numpy as np

from qkviz.cluster import HeadRunner, HeadTask, start_quiet_worker
from qkviz.core.alignment import Alignment, align_head
from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.store.locks import LockBusy, exclusive_lock
from qkviz.store.projections import ProjectionCache, ProjectionSpec
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.projection.attention_graph import GRAPH_PARAMS, AttentionGraph, attention_graph, check_graph_params
from qkviz.projection.catalogue import (FitInputs, Projection, ProjectionMethod, layout_spec, projection_method,
                                        two_d_spec, warm_up)
from qkviz.projection.sampling import (assemble, attention_affinities, perplexity_affinities, place, polish_tsne,
                                       refine_tsne, sample_points, spread_over_graph, stratified_sample)
from qkviz.projection.tsne_embedding import fft_grid
from qkviz.store.run import StoredRun, open_stored_run

if TYPE_CHECKING:
    from qkviz.cluster import DaskClient

logger = logging.getLogger(__name__)


def plan_specs(run: StoredRun, methods: Iterable[str], dims: Iterable[int], layers: Iterable[int],
               heads: Iterable[int], alignment: Alignment = Alignment(), seed: int = 0,
               params: dict[str, dict] | None = None) -> list[ProjectionSpec]:
    """One spec per (layer, head, method, dim), with each method's full parameters and the seed: every setting
    checked here, before any work starts (:func:`qkviz.projection.catalogue.resolve_params`)."""
    specs = []
    for name in methods:
        method = projection_method(name)
        for dim in dims:
            asked = (params or {}).get(name, {})
            spec = layout_spec(0, 0, name, dim, translate_keys=alignment.translate_keys,
                               scale_norms=alignment.scale_norms, seed=seed, params=asked)
            used = dict(spec.params)
            if asked.get("sample", 0) > run.n_tokens:   # the default may exceed a small run: it then fits all
                raise QkvizError(f"a sample of {asked['sample']} tokens is more than the run's {run.n_tokens}; "
                                 f"ask for at most {run.n_tokens}, or 0 to fit every token")
            fitted = used["sample"] if 0 < used.get("sample", 0) < run.n_tokens else run.n_tokens
            if method.uses_attention:   # the graph's parameters against the head's size
                check_graph_params(fitted, **{name: used[name] for name in GRAPH_PARAMS})
            for layer in layers:
                for head in heads:
                    run.check_head(layer, head)
                    specs.append(replace(spec, layer=layer, head=head))
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
                             f"the run again, with {option('dtype', 'float32')} if it was float16")
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
                needed = max(_neighbours_needed(spec, len(fit.points))
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


def _neighbours_needed(spec: ProjectionSpec, n_points: int) -> int:
    needed = projection_method(spec.method).neighbours_needed
    return 0 if needed is None else needed(dict(spec.params), n_points)


def _project_one(run: StoredRun, cache: ProjectionCache, spec: ProjectionSpec, fit: FitPoints, aligned,
                 graphs: dict, attention_graphs: dict) -> dict:
    started = time.perf_counter()
    method = projection_method(spec.method)
    params = dict(spec.params)
    seed = params.pop("seed")
    start_2d = cache.load(two_d_spec(spec)) if method.refines_2d and spec.dim == 3 else None
    if start_2d is not None and fit.chosen is not None:
        start_2d = start_2d[sample_points(fit.chosen, run.n_tokens)]
    attention = None
    if method.uses_attention:
        graph_params = {name: params[name] for name in GRAPH_PARAMS}
        key = tuple(sorted(graph_params.items()))
        if key not in attention_graphs:
            attention_graphs[key] = attention_graph(
                fit.queries, fit.keys, fit.points, run.logit_rule(spec.layer, spec.head),
                first_tokens=fit.first_tokens, **graph_params)
        attention = attention_graphs[key]
    projection = method.fit(FitInputs(fit.points, spec.dim, seed, params, graphs.get(params.get("metric")),
                                      start_2d, attention))
    coordinates = projection.coordinates
    if fit.chosen is not None:
        coordinates = _place_rest(run, spec, method, params, fit, aligned.points, projection, seed)
    seconds = time.perf_counter() - started
    cache.store(spec, coordinates, details={
        "seconds": round(seconds, 3), "norm_scale": aligned.norm_scale,
        "fitted_tokens": run.n_tokens if fit.chosen is None else len(fit.chosen),
        "adjusted": {name: list(pair) for name, pair in projection.adjusted.items()}})
    return {"spec": spec, "cached": False, "seconds": seconds, "adjusted": projection.adjusted}


def _place_rest(run: StoredRun, spec: ProjectionSpec, method: ProjectionMethod, params: dict, fit: FitPoints,
                aligned: np.ndarray, projection: Projection, seed: int) -> np.ndarray:
    """The whole head's coordinates from the fitted sample's (:mod:`qkviz.projection.sampling`): a 2D layout of a
    method with a ``polish_version`` spread over the whole head's attention graph and polished on it; the others
    placed by their affinities to the sample (attention affinities for the attention methods)."""
    n = run.n_tokens
    if method.polish_version and spec.dim == 2:
        graph = attention_graph(fit.head_queries, fit.head_keys, aligned, run.logit_rule(spec.layer, spec.head),
                                first_tokens=fit.head_first_tokens,   # at the alpha the sample's layout chose
                                **{name: projection.params.get(name, params[name]) for name in GRAPH_PARAMS})
        start = spread_over_graph(graph.matrix, projection.coordinates, sample_points(fit.chosen, n))
        return polish_tsne(start, graph, seed, fft=fft_grid(params))
    rest = np.setdiff1d(np.arange(n), fit.chosen)
    if method.uses_attention:
        affinities = attention_affinities(
            fit.head_queries, fit.head_keys, aligned, fit.chosen, run.logit_rule(spec.layer, spec.head),
            hidden_keys=fit.first_tokens if params["hide_first_token"] else None,
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


def start_worker(warm_up_methods: tuple[str, ...] = (), niceness: int = 0) -> None:
    """Worker start-up (:func:`qkviz.cluster.start_quiet_worker`: Ctrl-C left to the parent, ended with it, one
    BLAS thread, ``niceness``), then each method's warm-up (numba compiled once per worker, not once per head)."""
    start_quiet_worker(niceness)
    warm_up(warm_up_methods)


def projection_runner(run: StoredRun, jobs: int = 1, client: "DaskClient | None" = None, *, methods: tuple[str, ...] = (),
                      niceness: int = 0, always_pool: bool = False) -> HeadRunner:
    """The :class:`~qkviz.cluster.HeadRunner` of :func:`project_head` tasks: in this process (one job), on a
    persistent pool of ``jobs`` worker processes started by :func:`start_worker` (spawned: no state forked from
    the parent), or on the workers of a Dask ``client`` (task keys ``project-L3H4-...``). Close it (``with``)."""
    return HeadRunner(run, "project", jobs, client, initializer=start_worker, initargs=(tuple(methods), niceness),
                      always_pool=always_pool, doing="projecting",
                      instead=f"project that head here ({option('client', None, flag='--dask')} left out)")


def run_tasks(run: StoredRun, specs: list[ProjectionSpec], runner: HeadRunner | None = None) -> Iterator[dict]:
    """Run one task per head with layouts not yet cached on ``runner`` (:func:`projection_runner`; ``None``: in
    this process); yield each layout's outcome as its head finishes.

    A head another process is projecting is skipped at first and waited for at the end (then read from the
    cache, or computed if that process did not finish it)."""
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    todo = []
    for spec in specs:
        if cache.contains(spec):
            yield {"spec": spec, "cached": True, "seconds": 0.0}
        else:
            todo.append(spec)
    runner = projection_runner(run) if runner is None else runner
    busy: list[list[ProjectionSpec]] = []
    for _, outcomes in runner.run(project_head, _head_tasks(run, head_groups(todo), wait=False)):
        yield from _sorted_out(outcomes, busy)
    for _, outcomes in runner.run(project_head, _head_tasks(run, busy, wait=True)):
        yield from outcomes


def _head_tasks(run: StoredRun, groups: list[list[ProjectionSpec]], wait: bool) -> list[HeadTask]:
    path = str(Path(run.path).absolute())   # a worker's working directory is not ours
    return [HeadTask(group[0].layer, group[0].head, (path, group, wait)) for group in groups]


def _sorted_out(outcomes: list[dict], busy: list[list[ProjectionSpec]]) -> list[dict]:
    """The outcomes to report now; a busy head's specs are added to ``busy`` instead."""
    waiting = [outcome["spec"] for outcome in outcomes if outcome.get("busy")]
    if waiting:
        busy.append(waiting)
    return [outcome for outcome in outcomes if not outcome.get("busy")]
