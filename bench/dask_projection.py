"""Projection on Dask against the local pool: the same heads, method and seed, in one run of this script.

    python -m bench.dask_projection [--run runs/minilm] [--method attn-tsne] [--heads 4] [--workers 2]

The first ``--heads`` heads of the run (layer by layer) are projected by the local process pool of
``qkviz project --jobs W`` and by a Dask ``LocalCluster`` of W worker processes with one thread each
(``--dask local:W``), through the same :func:`qkviz.projection.run_tasks` and the same per-head task,
each time into a fresh copy of the run (no cached layouts), for ``--rounds`` rounds, the local pool first in
the first round, Dask first in the second, and so on, so that both meet the same load and neither always runs
second. ``--json`` (default ``bench/results/dask_projection.json``) records each round with the date, machine,
load averages and arguments. Both executors are started and warmed (the libraries imported in every worker)
before the clock starts (start-up is timed apart: the pool first, then the cluster, so the pool's workers are the
first to read the libraries from disk); the layouts are checked to be equal. Default run:
``runs/minilm`` (MiniLM over 5,000 tokens, as ``scripts/demo.sh`` makes it) if it exists, else one extracted here.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")
REPO = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402
from qkviz.extraction import DEFAULT_CORPUS  # noqa: E402
from qkviz.cluster import HeadTask, dask_client  # noqa: E402
from qkviz.projection import plan_specs, projection_runner, run_tasks  # noqa: E402
from qkviz.store import CACHE_DIRECTORY  # noqa: E402
from qkviz.store import ProjectionCache  # noqa: E402
from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.figures.results import Results, figure, heads_named, seconds, source  # noqa: E402

DEFAULT_RUN = REPO / "runs" / "minilm"


def fresh_copy(run, directory: Path):
    shutil.copytree(run.path, directory, ignore=shutil.ignore_patterns(CACHE_DIRECTORY))
    return qkviz.open_run(directory)


def warm() -> int:
    """In a worker: import what the first task would otherwise pay for (the projection libraries)."""
    import openTSNE  # noqa: F401
    import pynndescent  # noqa: F401
    import sklearn.decomposition  # noqa: F401

    import qkviz.projection  # noqa: F401  (its tasks)

    return os.getpid()


def start_pool(source, workers: int, specs) -> tuple:
    """A warm local pool (a runner kept for every round: its workers read whichever run each task names) and its
    start-up seconds."""
    started = time.perf_counter()
    runner = projection_runner(source, workers, methods=tuple({spec.method for spec in specs}))
    list(runner.run(warm, [HeadTask(0, 0, ())] * workers))
    return runner, time.perf_counter() - started


def start_cluster(workers: int, stack: contextlib.ExitStack) -> tuple:
    """A client of a warm LocalCluster, as ``--dask local:W`` starts it (closed with ``stack``), and its start-up
    seconds."""
    started = time.perf_counter()
    client = stack.enter_context(dask_client(f"local:{workers}"))
    client.run(warm)
    return client, time.perf_counter() - started


def timed_projection(source, directory: Path, specs, make_runner) -> tuple[float, float, ProjectionCache]:
    """Wall seconds to project ``specs`` into a fresh copy of ``source`` at ``directory``, the sum of the layouts'
    own seconds (measured in the workers), and the copy's cache."""
    run = fresh_copy(source, directory)
    runner = make_runner(run)               # the Dask one checks that every worker sees the run: not timed
    started = time.perf_counter()
    outcomes = list(run_tasks(run, specs, runner))
    return (time.perf_counter() - started, sum(outcome["seconds"] for outcome in outcomes),
            ProjectionCache(run.path, run.manifest["fingerprint"]))


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN if DEFAULT_RUN.exists() else None)
    parser.add_argument("--method", default="attn-tsne")
    parser.add_argument("--dim", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4, help="how many heads (the first ones, layer by layer)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="rounds, local first and Dask first in turn")
    parser.add_argument("--json", type=Path, help="default: bench/results/dask_projection.json")
    parser.add_argument("--tokens", type=int, default=5000, help="tokens of the run extracted when --run is not given")
    args = smoke_arguments(parser, argv, out='json', method='pca', heads=1, workers=1, rounds=1)
    recorder = Recorder("dask_projection", vars(args), args.json)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        source = (qkviz.open_run(args.run) if args.run
                  else qkviz.extract("minilm", DEFAULT_CORPUS, scratch / "minilm", max_tokens=args.tokens))
        heads = [(layer, head) for layer in range(source.n_layers) for head in range(source.n_heads)][:args.heads]
        print(f"{source.path}: {source.n_tokens} tokens; {len(heads)} heads, {args.method} {args.dim}D, "
              f"{args.workers} workers; {os.cpu_count()} CPUs", flush=True)
        specs = [spec for layer, head in heads for spec in plan_specs(source, [args.method], [args.dim], [layer], [head])]
        with contextlib.ExitStack() as stack:
            pool, pool_start = start_pool(source, args.workers, specs)
            stack.callback(pool.close)
            client, cluster_start = start_cluster(args.workers, stack)
            print(f"start-up: local pool {pool_start:.1f} s, LocalCluster {cluster_start:.1f} s", flush=True)
            ratios, equal = [], True
            rounds = []
            for round_ in range(args.rounds):
                # the order alternates from round to round (local first, then Dask first, ...), so that neither
                # always meets the other's leftovers (warm caches, a load that rises or falls over the run)
                order = ("local", "dask") if round_ % 2 == 0 else ("dask", "local")
                timed = {}
                for side in order:
                    executor = (lambda run: pool) if side == "local" else (lambda run: projection_runner(run, client=client))
                    timed[side] = timed_projection(source, scratch / f"{side}-{round_}", specs, executor)
                (local_seconds, local_work, local_cache), (dask_seconds, dask_work, dask_cache) = timed["local"], timed["dask"]
                ratios.append(dask_seconds / local_seconds)
                equal &= all(np.array_equal(local_cache.load(spec), dask_cache.load(spec)) for spec in specs)
                rounds.append({"order": list(order), "local_s": round(local_seconds, 2), "dask_s": round(dask_seconds, 2),
                               "ratio": round(ratios[-1], 3), "local_layouts_s": round(local_work, 2),
                               "dask_layouts_s": round(dask_work, 2)})
                print(f"round {round_ + 1} ({' first, then '.join(order)}): local pool (--jobs {args.workers}) "
                      f"{local_seconds:.1f} s wall ({local_work:.1f} s in the layouts), Dask LocalCluster "
                      f"({args.workers} processes) {dask_seconds:.1f} s wall ({dask_work:.1f} s in the layouts): "
                      f"Dask / local {ratios[-1]:.2f}x", flush=True)
        print(f"Dask / local, median of {len(ratios)} rounds: {float(np.median(ratios)):.2f}x; layouts equal: {equal}",
              flush=True)
        print(recorder.write(tokens=source.n_tokens, heads=[list(pair) for pair in heads],
                             start_up_s={"local": round(pool_start, 2), "dask": round(cluster_start, 2)},
                             start_up_order=["local", "dask"],
                             rounds=rounds, median_ratio=round(float(np.median(ratios)), 3), layouts_equal=equal))


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

@figure("dask-projection")
def dask_projection(results: Results) -> str:
    result = results("dask_projection")
    arguments = result["arguments"]
    workers = arguments["workers"]
    rows = "\n".join(
        f"| {number} ({' first, then '.join('local pool' if side == 'local' else 'Dask' for side in round_['order'])}) "
        f"| {seconds(round_['local_s'])} | {seconds(round_['dask_s'])} | {round_['ratio']:.2f}× |"
        for number, round_ in enumerate(result["rounds"], 1))
    start = result["start_up_s"]
    equal = "equal to the bit in every round" if result["layouts_equal"] else "**not** equal in every round"
    order = result.get("start_up_order")
    started = (f" ({'the pool' if order[0] == 'local' else 'the cluster'} was started first: its workers were the "
               f"first to load the libraries)" if order else "")
    return (f"{len(result['heads'])} heads ({heads_named(result['heads'])}), {arguments['method']} "
            f"{arguments['dim']}D, {result['tokens']:,} tokens, {workers} workers:\n\n"
            f"| round (order) | local pool (`--jobs {workers}`) | Dask `LocalCluster` ({workers} processes) | "
            f"Dask / local |\n|---|---|---|---|\n{rows}\n\n"
            f"Median Dask / local {result['median_ratio']:.2f}×. Start-up, not in the times above: local pool "
            f"{seconds(start['local'])}, `LocalCluster` {seconds(start['dask'])}{started}. The layouts were {equal}. "
            f"(`python -m bench.dask_projection`; {source(results, 'dask_projection')}.)\n")


if __name__ == "__main__":
    main()
