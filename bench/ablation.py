"""Ablation cost benchmark: what ``qkviz ablate`` costs against extracting the same run, on the bundled models.

    python -m bench.ablation [--models minilm,smollm2,gemma3] [--tokens 2000] [--repeats 3] [--device cpu]
                             [--out bench/results/ablation.json]

For each model, over the first ``--tokens`` tokens of the bundled corpus:

* **as a user runs them**: ``qkviz extract`` (the converted model in the cache already: a warm extraction) and
  ``qkviz ablate`` of a seeded random head, each a whole process from start to exit, ``--repeats`` pairs in
  alternating order (extract first, then ablate first, ...), min / median / max and the median ratio;
* **where the ablation's time goes**, in this process: loading the model with its language-model head (the first
  call of a process does this), the first ablation (the clean and the ablated pass), and a second ablation of
  another head (the clean losses kept, one pass).

Writes ``bench/results/ablation.json`` (``--out``); docs/ablation.md's cost figure comes from it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402

import qkviz  # noqa: E402
from qkviz.probes import run_language_model  # noqa: E402

from bench.figures.results import Results, figure, source  # noqa: E402
from bench.harness import Recorder, smoke_arguments, summary  # noqa: E402

#: what the smoke test adds to ``--smoke`` (a tiny model saved as a directory)
SMOKE_ARGUMENTS = ("--models", "{model}")


def timed_process(command: list[str]) -> float:
    """Wall seconds of ``command`` from its start to its exit (it must succeed)."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return seconds


def measure(model: str, tokens: int, repeats: int, device: str, seed: int, directory: Path) -> dict:
    run_path = directory / Path(model).name
    cli = [sys.executable, "-m", "qkviz", "--quiet"]
    extract = [*cli, "extract", "--model", model, "--out", str(run_path), "--max-tokens", str(tokens), "--device",
               device, "--overwrite"]
    timed_process(extract)          # the first extraction converts and caches a bundled GGUF model: not timed
    run = qkviz.open_run(run_path)
    rng = np.random.default_rng(seed)
    heads = [(int(rng.integers(run.n_layers)), int(rng.integers(run.n_heads))) for _ in range(2)]
    ablate = [*cli, "ablate", "--run", str(run_path), "--layer", str(heads[0][0]), "--head", str(heads[0][1]),
              "--device", device]
    seconds = {"extract": [], "ablate": []}
    for repeat in range(repeats):
        order = ("extract", "ablate") if repeat % 2 == 0 else ("ablate", "extract")
        for name in order:
            seconds[name].append(timed_process(extract if name == "extract" else ablate))
            print(f"  {model} {name}: {seconds[name][-1]:.1f} s", flush=True)
    run = qkviz.open_run(run_path)     # the last extraction rewrote it
    started = time.perf_counter()
    run_language_model(run, device=device)
    load = time.perf_counter() - started
    started = time.perf_counter()
    first = run.ablate(*heads[0], device=device)
    first_seconds = time.perf_counter() - started
    started = time.perf_counter()
    run.ablate(*heads[1], device=device)
    second_seconds = time.perf_counter() - started
    print(f"  {model} in-process: load {load:.1f} s, first ablation {first_seconds:.1f} s, "
          f"second {second_seconds:.1f} s", flush=True)
    ratios = [a / e for a, e in zip(seconds["ablate"], seconds["extract"])]
    return {"model": model, "model_id": run.model_id, "tokens": run.n_tokens, "heads": heads,
            "measure": str(first.attrs["measure"]), "extract_seconds": summary(seconds["extract"]),
            "ablate_seconds": summary(seconds["ablate"]), "ratio": summary(ratios),
            "in_process": {"load_seconds": round(load, 3), "first_ablation_seconds": round(first_seconds, 3),
                           "second_ablation_seconds": round(second_seconds, 3)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=lambda text: text.split(","), default=["minilm", "smollm2", "gemma3"])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/ablation.json)")
    args = smoke_arguments(parser, argv, out="out", tokens=200, repeats=1)
    recorder = Recorder("ablation", vars(args), out=args.out)
    rows = []
    with tempfile.TemporaryDirectory(prefix="qkviz-bench-ablation-") as directory:
        for model in args.models:
            rows.append(measure(model, args.tokens, args.repeats, args.device, args.seed, Path(directory)))
            recorder.write(models=rows)
    print(f"wrote {recorder.write(models=rows)}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

@figure("ablation-cost")
def ablation_cost(results: Results) -> str:
    """docs/ablation.md: what an ablation costs against extracting the same run."""
    found = results("ablation")
    lines = ["| model (tokens) | `qkviz extract`, warm | `qkviz ablate` | ablate / extract | in one process: "
             "model load, first ablation, another head |", "|---|---|---|---|---|"]
    for row in found["models"]:
        extract, ablate, ratio, inside = (row["extract_seconds"], row["ablate_seconds"], row["ratio"],
                                          row["in_process"])
        lines.append(f"| {row['model']} ({row['tokens']:,}) | {extract['min']:.1f} / {extract['median']:.1f} / "
                     f"{extract['max']:.1f} s | {ablate['min']:.1f} / {ablate['median']:.1f} / {ablate['max']:.1f} s | "
                     f"{ratio['median']:.2f}× | {inside['load_seconds']:.1f} s, {inside['first_ablation_seconds']:.1f} s, "
                     f"{inside['second_ablation_seconds']:.1f} s |")
    runs = found["models"][0]["ratio"]["runs"]
    return ("\n".join(lines) + f"\n\nEach command a whole process (Python's start and imports included, as a user runs "
            f"it), min / median / max of {runs} pairs run in alternating order; the ratio is the median of each pair's "
            "ratio. In one process the models run one after the other: the first load (MiniLM's) includes importing "
            "transformers' modelling code, and another head's ablation reuses the clean pass. `python -m "
            f"bench.ablation` ({source(results, 'ablation')}).\n")


if __name__ == "__main__":
    main()
