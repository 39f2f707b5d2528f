"""How long ``run.projection(L, H)`` takes on a fresh run, where it makes the head's default layout on demand:
``python -m bench.on_demand [--run DIR] [--heads 6] [--seed 0] [--json bench/results/on_demand.json]``.

Without ``--run`` it extracts the demo's run first (``qkviz extract --model minilm --max-tokens 5000``, the bundled
MiniLM over the bundled corpus) into a temporary directory. Its projection cache is emptied, then in one fresh
process, for a seeded random sample of heads, each head in turn:

* ``made``: ``run.projection(L, H)`` with nothing cached: the run's default layout (attn-tsne 2D) made and cached;
  the first head also pays what a notebook's first call pays (imports, openTSNE's and numba's first use, the run's
  checksums), so it is reported apart (``first_call_s``) and the others as min / median / max;
* ``read``: the same call again (read from the cache);
* ``plot``: ``run.plot(L, H)`` (read from the cache, the figure built).

The machine is shared: the JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness import Recorder, smoke_arguments

REPO = Path(__file__).resolve().parent.parent


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def spread(values: list[float]) -> dict:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3), "max": round(max(values), 3),
            "n": len(values)}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of the tiny run, ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="an extracted run (default: extract the demo's MiniLM run)")
    parser.add_argument("--heads", type=int, default=6, help="heads timed (the first one apart)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the heads' sample")
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/on_demand.json")
    args = smoke_arguments(parser, argv, out="json", heads=2)
    recorder = Recorder("on_demand", vars(args), args.json)
    with tempfile.TemporaryDirectory(prefix="qkviz-on-demand-") as scratch:
        source = args.run
        if source is None:
            source = Path(scratch) / "minilm"
            subprocess.run([sys.executable, "-m", "qkviz", "-q", "extract", "--model", "minilm", "--out", str(source),
                            "--max-tokens", "5000"], check=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
        copy = shutil.copytree(source, Path(scratch) / "fresh", ignore=shutil.ignore_patterns("projections"))
        started = time.perf_counter()
        import qkviz

        run = qkviz.open_run(copy)
        opened = time.perf_counter() - started
        heads = np.random.default_rng(args.seed).choice(run.n_layers * run.n_heads, args.heads, replace=False)
        heads = [divmod(int(flat), run.n_heads) for flat in heads]
        made, read, plotted = [], [], []
        for layer, head in heads:
            made.append(timed(lambda: run.projection(layer, head, progress=False)))
            read.append(timed(lambda: run.projection(layer, head, progress=False)))
            plotted.append(timed(lambda: run.plot(layer, head, progress=False)))
            assert run.has_projection(layer, head, qkviz.projection.LAYOUT_METHOD)
        result = {"run": {"model": run.model_id, "tokens": run.n_tokens, "layers": run.n_layers, "heads": run.n_heads},
                  "method": qkviz.projection.LAYOUT_METHOD, "heads": [f"L{layer}H{head}" for layer, head in heads],
                  "open_s": round(opened, 3), "first_call_s": round(made[0], 3), "made_s": spread(made[1:]),
                  "made_each_s": [round(value, 3) for value in made], "read_s": spread(read), "plot_s": spread(plotted)}
    note = "one process; the first head's call includes the process's first use of the methods (apart)"
    print(f"wrote {recorder.write(note=note, **result)}")

if __name__ == "__main__":
    main()
