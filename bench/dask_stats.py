"""``qkviz stats`` serially, on a local pool and on Dask: the same run, in one run of this script.

    python bench/dask_stats.py [--run runs/minilm] [--workers 2] [--rounds 2] [--no-syntax]

Times ``qkviz -q stats [--syntax]`` end to end in a child process (as a user runs it: start-up of the pool or
of the ``LocalCluster`` included) four ways, in turn for ``--rounds`` rounds, each round starting one way further on, so that all meet the
same load: serially (numpy's BLAS using every core for the attention products), serially with one BLAS thread (a
worker's share), with ``--jobs W`` and with ``--dask local:W`` (one BLAS thread per worker); each into a fresh
copy of the run (without its layouts and results). The atlases made are checked to be equal (tables, exemplars and every array), and the
time of the spaCy parse made once by the caller (``--syntax``) is printed apart. Default run: ``runs/minilm``
(MiniLM over 5,000 tokens, as ``scripts/demo.sh`` makes it) if it exists, else one extracted here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import qkviz  # noqa: E402
from qkviz.analysis.head_atlas import load_atlas  # noqa: E402
from qkviz.extraction.corpus import DEFAULT_CORPUS  # noqa: E402
from qkviz.store.files import RUN_DIRECTORIES  # noqa: E402

DEFAULT_RUN = REPO / "runs" / "minilm"
QKVIZ = [sys.executable, "-m", "qkviz", "-q", "stats"]


def fresh_copy(run, directory: Path):
    shutil.copytree(run.path, directory, ignore=shutil.ignore_patterns(*RUN_DIRECTORIES, "correlation.parquet"))
    return qkviz.open_run(directory)


def timed_stats(source, directory: Path, options: list[str], env: dict[str, str]) -> tuple[float, object]:
    """Wall seconds of ``qkviz stats`` with ``options`` (and environment variables ``env``) on a fresh copy of
    ``source``, and the atlas it stored."""
    run = fresh_copy(source, directory)
    started = time.perf_counter()
    subprocess.run([*QKVIZ, "--run", str(run.path), *options], check=True,
                   env={**os.environ, "PYTHONPATH": str(REPO), **env})
    return time.perf_counter() - started, load_atlas(run)


def same_atlas(a, b) -> bool:
    try:
        pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
        pd.testing.assert_frame_equal(a.exemplars, b.exemplars, check_exact=True)
        for name in ("relative_position", "term_profiles", "update_histograms", "embedding_profiles"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    except AssertionError:
        return False
    return True


def parse_seconds(run) -> float:
    from qkviz.analysis.syntax import TokenSyntax, load_pipeline

    nlp = load_pipeline()
    started = time.perf_counter()
    TokenSyntax.parse(run, nlp)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN if DEFAULT_RUN.exists() else None)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2, help="alternating serial / pool / Dask rounds")
    parser.add_argument("--no-syntax", action="store_true", help="leave out --syntax (and spaCy)")
    parser.add_argument("--tokens", type=int, default=5000, help="tokens of the run extracted when --run is not given")
    args = parser.parse_args()
    syntax = [] if args.no_syntax else ["--syntax"]
    one_thread = {name: "1" for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    ways = {"serial": ([], {}), "serial, one BLAS thread": ([], one_thread),
            f"--jobs {args.workers}": (["--jobs", str(args.workers)], {}),
            f"--dask local:{args.workers}": (["--dask", f"local:{args.workers}"], {})}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        source = (qkviz.open_run(args.run) if args.run
                  else qkviz.extract("minilm", DEFAULT_CORPUS, scratch / "minilm", max_tokens=args.tokens,
                                     head_update=True))
        print(f"{source.path}: {source.n_tokens} tokens, {source.n_layers * source.n_heads} heads, "
              f"{'with' if syntax else 'without'} --syntax; {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}", flush=True)
        if syntax:
            print(f"spaCy parse of the corpus (once, by the caller): {parse_seconds(source):.1f} s", flush=True)
        seconds: dict[str, list[float]] = {way: [] for way in ways}
        first, equal = None, True
        for round_ in range(args.rounds):
            # the order turns from round to round (round 2 starts with the second way, ...), so that all meet the
            # same load and no way always runs first or last
            names = list(ways)
            for way in names[round_ % len(names):] + names[:round_ % len(names)]:
                number, (options, env) = names.index(way), ways[way]
                wall, atlas = timed_stats(source, scratch / f"{round_}-{number}", options + syntax, env)
                seconds[way].append(wall)
                first = atlas if first is None else first
                equal &= same_atlas(atlas, first)
                print(f"round {round_ + 1}: qkviz stats {way}: {wall:.1f} s", flush=True)
        serial = np.array(seconds["serial"])
        for way, walls in seconds.items():
            ratio = np.median(serial / np.array(walls))
            print(f"{way}: median {np.median(walls):.1f} s; speed-up over serial (median of the rounds' ratios) "
                  f"{ratio:.2f}x", flush=True)
        print(f"atlases equal: {equal}; load average now {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
