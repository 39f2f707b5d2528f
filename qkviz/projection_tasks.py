"""Projecting many heads: one pure task per head, run through a small executor seam.

:func:`project_head` is a pure function of (run path, spec) that leaves a cache entry behind; it
opens the run itself and reads only that head's memory-mapped vectors, so workers stay small.
:func:`run_tasks` hands the tasks to anything with ``submit(fn, *args) -> Future`` -- a local
process pool here (persistent: numba compiles once per worker, not once per head); a Dask or
Ray client offers the same call, so a distributed engine needs no change to the algorithms.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from typing import Iterable, Iterator

from qkviz.alignment import Alignment, align_head
from qkviz.projection_cache import ProjectionCache, ProjectionSpec
from qkviz.projectors import check_method, project, resolve_params
from qkviz.run import Run, open_run

logger = logging.getLogger(__name__)


def plan_specs(run: Run, methods: Iterable[str], dims: Iterable[int], layers: Iterable[int],
               heads: Iterable[int], alignment: Alignment = Alignment(), seed: int = 0,
               params: dict[str, dict] | None = None) -> list[ProjectionSpec]:
    """One spec per (layer, head, method, dim), with each method's full parameters and the seed."""
    specs = []
    for method in methods:
        for dim in dims:
            check_method(method, dim)
            used = {**resolve_params(method, (params or {}).get(method, {})), "seed": seed}
            for layer in layers:
                for head in heads:
                    run._check_head(layer, head)
                    specs.append(ProjectionSpec.of(layer, head, method, dim, alignment.translate_keys,
                                                   alignment.scale_norms, **used))
    return specs


def project_head(run_path: str, spec: ProjectionSpec) -> dict:
    """Compute and cache one head's layout unless it is cached; returns what happened."""
    run = open_run(run_path)
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    if cache.contains(spec):
        return {"spec": spec, "cached": True, "seconds": 0.0}
    started = time.perf_counter()
    aligned = align_head(run.queries(spec.layer, spec.head), run.keys(spec.layer, spec.head),
                         Alignment(spec.translate_keys, spec.scale_norms))
    params = dict(spec.params)
    seed = params.pop("seed")
    projection = project(aligned.points, spec.method, spec.dim, seed=seed, **params)
    seconds = time.perf_counter() - started
    cache.store(spec, projection.coordinates, details={
        "seconds": round(seconds, 3), "norm_scale": aligned.norm_scale,
        "adjusted": {name: list(pair) for name, pair in projection.adjusted.items()}})
    return {"spec": spec, "cached": False, "seconds": seconds, "adjusted": projection.adjusted}


class InlineExecutor(Executor):
    """Runs each task in this process when it is submitted (``--jobs 1``)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to the caller through the future, as a pool would
            future.set_exception(error)
        return future


def local_executor(jobs: int) -> Executor:
    """A persistent pool of ``jobs`` worker processes (spawned: no state forked from the parent)."""
    if jobs <= 1:
        return InlineExecutor()
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


def run_tasks(run: Run, specs: list[ProjectionSpec], executor: Executor) -> Iterator[dict]:
    """Submit every spec not yet cached; yield each task's outcome as it finishes."""
    cache = ProjectionCache(run.path, run.manifest["fingerprint"])
    todo = [spec for spec in specs if not cache.contains(spec)]
    for spec in specs:
        if spec not in todo:
            yield {"spec": spec, "cached": True, "seconds": 0.0}
    futures = [executor.submit(project_head, str(run.path), spec) for spec in todo]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        for future in futures:
            future.cancel()
