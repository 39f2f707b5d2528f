"""Projection on Dask against the local pool: the same heads, method and seed, in one run of this script.

    python bench/dask_projection.py [--run runs/minilm] [--method attn-tsne] [--heads 4] [--workers 2]

The first ``--heads`` heads of the run (layer by layer) are projected twice, each time into a fresh copy
of the run (no cached layouts): by the local process pool of ``qkviz project --jobs W`` and by a Dask
``LocalCluster`` of W worker processes with one thread each (``--dask local:W``), through the same
:func:`qkviz.projection.run_tasks` and the same per-head task. Both executors are started and warmed
(the libraries imported in every worker) before the clock starts (start-up is printed apart); the layouts are checked to be equal. Default run:
``/work/main/runs/minilm`` (MiniLM over 5,000 tokens) if it exists, else one extracted here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402
from qkviz.extraction.corpus import DEFAULT_CORPUS  # noqa: E402
from qkviz.projection import DaskExecutor, local_executor, plan_specs, run_tasks  # noqa: E402
from qkviz.store.files import CACHE_DIRECTORY  # noqa: E402
from qkviz.store.projections import ProjectionCache  # noqa: E402

DEFAULT_RUN = Path("/work/main/runs/minilm")


def fresh_copy(run, directory: Path):
    shutil.copytree(run.path, directory, ignore=shutil.ignore_patterns(CACHE_DIRECTORY))
    return qkviz.open_run(directory)


def warm() -> int:
    """In a worker: import what the first task would otherwise pay for (the projection libraries)."""
    import openTSNE  # noqa: F401
    import pynndescent  # noqa: F401
    import sklearn.decomposition  # noqa: F401

    import qkviz.projection.tasks  # noqa: F401

    return os.getpid()


def project_locally(run, specs, workers: int) -> tuple[float, float]:
    """(start-up seconds, projection seconds) on a warm local pool."""
    started = time.perf_counter()
    executor = local_executor(workers, compile_umap="umap" in {spec.method for spec in specs})
    for future in [executor.submit(warm) for _ in range(workers)]:
        future.result()
    ready = time.perf_counter()
    try:
        list(run_tasks(run, specs, executor))
        return ready - started, time.perf_counter() - ready
    finally:
        executor.shutdown()


def project_on_dask(run, specs, workers: int) -> tuple[float, float]:
    """(start-up seconds, projection seconds) on a warm LocalCluster."""
    import distributed

    started = time.perf_counter()
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        executor = DaskExecutor(client, run)      # checks that every worker sees the run
        client.run(warm)
        ready = time.perf_counter()
        list(run_tasks(run, specs, executor))
        return ready - started, time.perf_counter() - ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN if DEFAULT_RUN.exists() else None)
    parser.add_argument("--method", default="attn-tsne")
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4, help="how many heads (the first ones, layer by layer)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=5000, help="tokens of the run extracted when --run is not given")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        source = (qkviz.open_run(args.run) if args.run
                  else qkviz.extract("minilm", DEFAULT_CORPUS, scratch / "minilm", max_tokens=args.tokens))
        heads = [(layer, head) for layer in range(source.n_layers) for head in range(source.n_heads)][:args.heads]
        print(f"{source.path}: {source.n_tokens} tokens; {len(heads)} heads, {args.method} {args.dim}D, "
              f"{args.workers} workers; {os.cpu_count()} CPUs", flush=True)
        local_run, dask_run = fresh_copy(source, scratch / "local"), fresh_copy(source, scratch / "dask")
        specs = [spec for layer, head in heads for spec in plan_specs(source, [args.method], [args.dim], [layer], [head])]
        local_start, local_seconds = project_locally(local_run, specs, args.workers)
        print(f"local pool (--jobs {args.workers}): {local_seconds:.1f} s (start-up {local_start:.1f} s)", flush=True)
        dask_start, dask_seconds = project_on_dask(dask_run, specs, args.workers)
        print(f"Dask LocalCluster ({args.workers} processes): {dask_seconds:.1f} s (start-up {dask_start:.1f} s)",
              flush=True)
        print(f"Dask / local: {dask_seconds / local_seconds:.2f}x the time; "
              f"with start-up {(dask_start + dask_seconds) / (local_start + local_seconds):.2f}x", flush=True)
        caches = [ProjectionCache(run.path, run.manifest["fingerprint"]) for run in (local_run, dask_run)]
        equal = all(np.array_equal(caches[0].load(spec), caches[1].load(spec)) for spec in specs)
        print(f"layouts equal: {equal}", flush=True)


if __name__ == "__main__":
    main()
