"""Projecting many heads: one pure task per head, run through a small executor seam.

:func:`project_head` is a pure function of (run path, one head's specs) that leaves cache entries
behind; it opens the run itself and reads only that head's memory-mapped vectors, so workers stay
small.
:func:`run_tasks` hands the tasks to anything with ``submit(fn, *args) -> Future`` -- a local
process pool here (persistent: numba compiles once per worker, not once per head); a Dask or
Ray client offers the same call, so a distributed engine needs no change to the algorithms.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from typing import Iterable, Iterator

import numpy as np

from qkviz.core.alignment import Alignment, align_head
from qkviz.core.errors import QkvizError
from qkviz.store.locks import LockBusy, exclusive_lock
from qkviz.store.projections import ATTENTION_METHODS, ONLY_3D, ProjectionCache, ProjectionSpec, check_method, resolve_params
from qkviz.projection.neighbors import NeighborGraph, neighbor_graph
from qkviz.projection.attention_graph import GRAPH_PARAMS, AttentionGraph, attention_graph, check_graph_params
from qkviz.projection.methods import neighbors_needed, project_points
from qkviz.store.run import StoredRun, open_run

logger = logging.getLogger(__name__)


def plan_specs(run: StoredRun, methods: Iterable[str], dims: Iterable[int], layers: Iterable[int],
               heads: Iterable[int], alignment: Alignment = Alignment(), seed: int = 0,
               params: dict[str, dict] | None = None) -> list[ProjectionSpec]:
    """One spec per (layer, head, method, dim), with each method's full parameters and the seed."""
    specs = []
    for method in methods:
        for dim in dims:
            check_method(method, dim)
            used = {**resolve_params(method, (params or {}).get(method, {}), dim), "seed": seed}
            if method in ATTENTION_METHODS:   # refused before any work starts, not inside a worker
                check_graph_params(run.n_tokens, **{name: used[name] for name in GRAPH_PARAMS})
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
    run = open_run(run_path)
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    try:
        with exclusive_lock(cache.head_lock(specs[0].layer, specs[0].head), wait=wait):
            return _project_head(run, cache, specs)
    except LockBusy:
        return [{"spec": spec, "busy": True} for spec in specs]


def _project_head(run: StoredRun, cache: ProjectionCache, specs: list[ProjectionSpec]) -> list[dict]:
    """The work of :func:`project_head` (the head is aligned once, and one neighbour graph per metric
    serves all its UMAP and t-SNE layouts)."""
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
        graphs: dict[str, NeighborGraph] = {}
        for metric in {dict(spec.params).get("metric") for spec in todo} - {None}:
            needed = max(neighbors_needed(spec.method, dict(spec.params), len(aligned.points))
                         for spec in todo if dict(spec.params).get("metric") == metric)
            graphs[metric] = neighbor_graph(aligned.points, needed, metric)
    except OSError:            # the file system (permission, a full disk): every head would fail alike
        raise
    except Exception as error:  # noqa: BLE001 -- recorded on the head's layouts; the other heads go on
        return outcomes + [_failed(cache, spec, error) for spec in todo]
    attention_graphs: dict[tuple, AttentionGraph] = {}
    for spec in sorted(todo, key=lambda spec: spec.dim):  # a 2D t-SNE first: the 3D one starts from it
        try:
            outcomes.append(_project_one(run, cache, spec, aligned, graphs, attention_graphs))
        except OSError:
            raise
        except Exception as error:  # noqa: BLE001 -- as above
            outcomes.append(_failed(cache, spec, error))
    return outcomes


def _project_one(run: StoredRun, cache: ProjectionCache, spec: ProjectionSpec, aligned, graphs: dict,
                 attention_graphs: dict) -> dict:
    started = time.perf_counter()
    params = dict(spec.params)
    seed = params.pop("seed")
    tsne_2d = cache.load(_tsne_2d_spec(spec)) if spec.method in ONLY_3D and spec.dim == 3 else None
    attention = None
    if spec.method in ATTENTION_METHODS:
        graph_params = {name: params[name] for name in GRAPH_PARAMS}
        key = tuple(sorted(graph_params.items()))
        if key not in attention_graphs:
            attention_graphs[key] = attention_graph(
                run.queries(spec.layer, spec.head), run.keys(spec.layer, spec.head), aligned.points,
                run.scale(spec.layer), softcap=run.softcap(spec.layer),
                first_tokens=run.sentences["first_token"].to_numpy(), **graph_params)
        attention = attention_graphs[key]
    projection = project_points(aligned.points, spec.method, spec.dim, seed=seed,
                                graph=graphs.get(params.get("metric")), tsne_2d=tsne_2d, attention=attention,
                                **params)
    seconds = time.perf_counter() - started
    cache.store(spec, projection.coordinates, details={
        "seconds": round(seconds, 3), "norm_scale": aligned.norm_scale,
        "adjusted": {name: list(pair) for name, pair in projection.adjusted.items()}})
    return {"spec": spec, "cached": False, "seconds": seconds, "adjusted": projection.adjusted}


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
    """Worker start-up: leave Ctrl-C to the parent, end with it, use one BLAS thread (a worker is one core's
    share; more threads than cores make OpenBLAS spin: a 2 ms PCA took 0.5 s), lower its priority by
    ``niceness`` (background work yields to the app), and compile UMAP's numba code once if needed."""
    import os
    import warnings

    import numpy as np
    from threadpoolctl import threadpool_limits

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent()
    threadpool_limits(1)
    if niceness:
        os.nice(niceness)
    if not compile_umap:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        project_points(np.random.default_rng(0).normal(size=(64, 4)), "umap", 2, n_epochs=10)


def _end_with_parent() -> None:
    """On Linux, have the kernel end this worker when the process that started it dies (even by SIGKILL)."""
    import ctypes
    import os

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):         # not Linux: the pool's own shutdown ends the workers
        return
    if os.getppid() == 1:                      # the parent died before the call
        os._exit(1)


def local_executor(jobs: int, compile_umap: bool = True) -> Executor | None:
    """A persistent pool of ``jobs`` worker processes (spawned: no state forked from the parent);
    ``None`` for one job, which runs the tasks in this process."""
    if jobs <= 1:
        return None
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=start_worker, initargs=(compile_umap,))


def run_tasks(run: StoredRun, specs: list[ProjectionSpec], executor: Executor | None) -> Iterator[dict]:
    """Submit one task per head with layouts not yet cached (or run them here when ``executor`` is
    ``None``); yield each layout's outcome as its head finishes.

    A head another process is projecting is skipped at first and waited for at the end (then read from
    the cache, or computed if that process did not finish it)."""
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
    futures = [executor.submit(project_head, str(run.path), group, False) for group in head_groups(todo)]
    try:
        for future in as_completed(futures):
            yield from _sorted_out(future.result(), busy)
        futures = [executor.submit(project_head, str(run.path), group) for group in busy]
        for future in as_completed(futures):
            yield from future.result()
    finally:
        for future in futures:
            future.cancel()


def _sorted_out(outcomes: list[dict], busy: list[list[ProjectionSpec]]) -> list[dict]:
    """The outcomes to report now; a busy head's specs are added to ``busy`` instead."""
    waiting = [outcome["spec"] for outcome in outcomes if outcome.get("busy")]
    if waiting:
        busy.append(waiting)
    return [outcome for outcome in outcomes if not outcome.get("busy")]
