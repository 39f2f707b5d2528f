"""The composition graph of a 1,024-head model (issue 53, point 3): its circuits computed, and drawn in Chromium.

    python -m bench.circuits_scale [--dir /tmp/qkviz-circuits-scale] [--parts subsets,view] [--every 16,8]
                                   [--repeats 5] [--out bench/results/circuits_scale.json]
    python -m bench.circuits_scale --parts full        # the whole `qkviz stats --circuits` (about an hour)

The subject is ``bench.modern_model``'s: a random Llama-shaped decoder of 32 layers x 32 query heads (8 key-value
heads, head size 8) over three documents of about 3,000 tokens (9,123 tokens), extracted in ``<dir>/run`` when
missing. The default sample of the circuits (5,000 tokens, whole sequences) is one of those documents. Parts:

* ``subsets`` -- the circuits of every K-th layer's heads for each K of ``--every`` (the layers counted back from
  the last, so that every subset's pass runs through every layer, as the full run's does), each in a child process
  (``qkviz.explain.head_circuits``, the code ``qkviz stats --circuits`` runs): its wall seconds, CPU seconds and peak
  resident memory. The full run's time is **extrapolated**, not measured: the line through (layers, wall seconds)
  of the subsets, at every layer. The per-layer work grows with the layer (its parts), and a subset counted back from
  the last layer holds later layers than the average: the line leans high.
* ``full`` -- ``qkviz stats --run <dir>/run --circuits`` itself, in a child process: wall seconds and peak memory
  (what the goal is judged on).
* ``view`` -- the composition view at 1,024 heads in headless Chromium (1400 x 900): ``qkviz serve`` on a run of the
  same model over three short documents (about 300 tokens in all, ``<dir>/short``) whose circuits are computed for
  every head (``qkviz.explain.compute_circuits``, timed too): real circuits of the right shape, on fewer tokens. Each round,
  alternating cold (a new browser context) and warm (a reload): from navigation to the layer x layer matrix drawn
  (the view opens on it above 256 heads), then from the click on a cell to its layer's head graph drawn; the cells
  clicked turn through the layers.

``--smoke``: the model of ``bench.modern_scale``'s smoke shape, one subset, one round of the view, the result in a
temporary file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, minutes, source  # noqa: E402
from bench.harness import Recorder, load_span, run_measured, smoke_arguments  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
QKVIZ = [sys.executable, "-m", "qkviz", "-q"]
PARTS = ("subsets", "full", "view")
SMOKE_SHAPE = {"layers": 2, "heads": 4, "kv_heads": 2, "context": 512}
SMOKE_DOCUMENTS = {"documents": 2, "document_tokens": 100}
#: what the smoke test adds to ``--smoke`` (``{tmp}``: the test's temporary directory)
SMOKE_ARGUMENTS = ("--dir", "{tmp}/circuits-scale")
#: the short run of the view part: three documents of about 100 tokens
SHORT_DOCUMENTS = {"documents": 3, "document_tokens": 100}

CIRCUITS_1024 = Goal("every head's circuits of the 1,024-head model (three sides, the default sample)", 60, "min",
                     True, "circuits_scale", "wall time of `qkviz stats --circuits`",
                     lambda found: found["full"]["seconds"] / 60 if "full" in found else None)
LAYER_VIEW = Goal("the composition view's layer matrix at 1,024 heads drawn", 2, "s", True, "circuits_scale",
                  "navigation to drawn, cold median: a first visit, the slower",
                  lambda found: found["view"]["layers"]["cold"]["median_ms"] / 1000 if "view" in found else None)
OPENED_LAYER = Goal("a layer opened from the matrix at 1,024 heads drawn", 2, "s", True, "circuits_scale",
                    "click to drawn, median of every round",
                    lambda found: found["view"]["opened"]["median_ms"] / 1000 if "view" in found else None)


def prepared(directory: Path, smoke: bool, name: str = "run", documents: dict | None = None) -> Path:
    """``<directory>/<name>``: the model's run over its documents, made when missing (the model too)."""
    from transformers import AutoTokenizer

    from bench.modern_model import make_documents, make_model

    model = make_model(directory / "model", **(SMOKE_SHAPE if smoke else {}))
    run = directory / name
    corpus = directory / f"{name}-documents.txt"
    if not corpus.exists():
        make_documents(corpus, AutoTokenizer.from_pretrained(model), **(documents or (SMOKE_DOCUMENTS if smoke else {})))
    if not (run / "manifest.json").exists():
        subprocess.run([*QKVIZ, "extract", "--model", str(model), "--corpus", str(corpus), "--out", str(run),
                        "--overwrite"], check=True, cwd=REPO)
    return run


#: the child that times one subset: its CPU seconds and sample written as JSON to argv[3]
CHILD = """import json, sys, time
import qkviz
from qkviz.explain import head_circuits
run = qkviz.open_run(sys.argv[1]); layers = json.loads(sys.argv[2])
started, cpu = time.perf_counter(), time.process_time()
done = head_circuits(run, [(layer, head) for layer in layers for head in range(run.n_heads)])
sample = next(iter(done.values())).sample
json.dump({"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
           "tokens": sample["n_tokens"], "sentences": len(sample["sentences"])}, open(sys.argv[3], "w"))
"""


def replaced_runs(previous: dict | None, parts: list[str]) -> list[dict]:
    """Every run the file kept (``earlier_runs``) and, of the file replaced, each part measured again now: its date,
    load and figures, so that no run of a goal is dropped when its part is measured again."""
    if previous is None:
        return []
    kept = list(previous["figures"].get("earlier_runs", []))
    load = previous.get("load", {})
    span = load_span(load)
    return kept + [{"part": part, "date": previous["date"], "load_average": span, "figures": previous["figures"][part]}
                   for part in parts if part in previous["figures"]]


def subset_layers(n_layers: int, every: int) -> list[int]:
    """Every ``every``-th layer counted back from the last (the last always among them)."""
    return sorted(range(n_layers - 1, -1, -every))


def subsets(run: Path, everies: list[int]) -> dict:
    """Each subset timed in a child process, and the full run extrapolated from them (a line through (layers,
    seconds); with one subset, its seconds per layer times the layers)."""
    import qkviz

    n_layers, n_heads = qkviz.open_run(run).n_layers, qkviz.open_run(run).n_heads
    timed = []
    for every in everies:
        layers = subset_layers(n_layers, every)
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "child.json"
            measured = run_measured([sys.executable, "-c", CHILD, str(run), json.dumps(layers), str(out)], cwd=REPO)
            if measured["returncode"] != 0:
                raise SystemExit(f"the subset of every {every}th layer failed (exit {measured['returncode']})")
            child = json.loads(out.read_text())
        timed.append({"every": every, "layers": layers, "heads": len(layers) * n_heads, **child,
                      "process_seconds": round(measured["seconds"], 1), "peak_mb": round(measured["peak_mb"]),
                      "load_average": [round(value, 2) for value in os.getloadavg()]})
        print(f"every {every}: {len(layers)} layers, {child['seconds']:.1f} s wall, {child['cpu_seconds']:.1f} s CPU, "
              f"peak {measured['peak_mb']:.0f} MB", flush=True)
    xs = [len(one["layers"]) for one in timed]
    ys = [one["seconds"] for one in timed]
    if len(set(xs)) > 1:
        slope, intercept = statistics.linear_regression(xs, ys)
    else:
        slope, intercept = ys[0] / xs[0], 0.0
    return {"n_layers": n_layers, "n_heads": n_heads, "timed": timed,
            "extrapolated": {"seconds": round(intercept + slope * n_layers, 1), "per_layer_s": round(slope, 2),
                             "shared_s": round(intercept, 1), "from_layers": xs}}


def full(run: Path) -> dict:
    measured = run_measured([*QKVIZ, "stats", "--run", str(run), "--circuits"], cwd=REPO)
    if measured["returncode"] != 0:
        raise SystemExit(f"qkviz stats --circuits failed (exit {measured['returncode']})")
    sample = json.loads((run / "circuits" / "circuits.json").read_text())["sample"]
    return {"seconds": round(measured["seconds"], 1), "peak_mb": round(measured["peak_mb"]),
            "load_average": [round(value, 2) for value in os.getloadavg()],
            "sample": {"tokens": sample["n_tokens"], "sequences": len(sample["sentences"]), "budget": sample["budget"]}}


@figure("circuits-scale")
def circuits_figure(results: Results) -> str:
    found = results("circuits_scale")
    lines = []
    if "full" in found:
        every = found["full"]
        sample = every.get("sample")
        lines.append("- **Every head's circuit**, `qkviz stats --circuits`"
                     + (f" (the default sample: {sample['tokens']:,} tokens, {sample['sequences']} whole sequence(s) "
                        f"under its budget of {sample['budget']:,})" if sample else "")
                     + f": {minutes(every['seconds'])}, peak "
                     f"{every['peak_mb']:,} MB, load {every['load_average'][0]:.1f} after it (1-minute average; the file's header "
                     f"gives its latest part's) (goal {verdict(CIRCUITS_1024, results)}).")
    if "subsets" in found:
        subsets = found["subsets"]
        for one in subsets["timed"]:
            lines.append(f"- **Every {one['every']}th layer's heads** (layers {', '.join(map(str, one['layers']))}: "
                         f"{one['heads']} heads, {one['tokens']:,} tokens): {minutes(one['seconds'])} wall, "
                         f"{minutes(one['cpu_seconds'])} of CPU, peak {one['peak_mb']:,} MB (load "
                         f"{one['load_average'][0]:.1f} after it).")
        guess = subsets["extrapolated"]
        lines.append(f"- **Extrapolated, not measured**: the line through those runs' wall times, "
                     f"{guess['shared_s']:.0f} s shared (the traced pass, every layer's stream) and "
                     f"{guess['per_layer_s']:.0f} s a layer, gives {minutes(guess['seconds'])} for all "
                     f"{subsets['n_layers']} layers ({subsets['n_layers'] * subsets['n_heads']:,} heads)"
                     + (". " if "full" in found else " (no goal is judged on an extrapolation: the whole run is "
                        "`python -m bench.circuits_scale --parts full`). ")
                     + "The later layers hold more parts, and subsets counted back from the last layer hold more "
                       "of them than the average layer: the line leans high. `qkviz stats --circuits` makes the head "
                       "atlas first, whose own time adds to this.")
    if not lines:
        lines.append("Not measured yet: `python -m bench.circuits_scale --parts subsets` times every 16th and every "
                     "8th layer's heads and extrapolates, `--parts full` runs the whole `qkviz stats --circuits`.")
    lines += ["", f"`python -m bench.circuits_scale` ({source(results, 'circuits_scale')})."]
    return "\n".join(lines) + "\n"


@figure("composition-layers")
def composition_figure(results: Results) -> str:
    found = results("circuits_scale")
    view = found["view"]
    circuits, layers, opened = view["circuits"], view["layers"], view["opened"]

    def spread(one: dict) -> str:
        return f"{one['min_ms'] / 1000:.2f} / {one['median_ms'] / 1000:.2f} / {one['max_ms'] / 1000:.2f} s"
    made = circuits.get("computed")
    lines = [f"At {circuits['heads']:,} heads ({circuits['n_layers']} layers, `bench.modern_model`'s model), in headless "
             f"Chromium, 1400 × 900, {len(opened['runs_ms'])} rounds (min / median / max). The circuits are real, "
             f"every head's three sides, but over **{circuits['tokens']:,} tokens** (a run of the same model over "
             "three short documents"
             + (f", computed in {minutes(made['seconds'])}" if made else "") + "), not the default sample: the "
             f"matrix and the graphs have the full run's shape ({circuits['rows']:,} rows).",
             "",
             f"- **Layer × layer matrix** (the view opens on it), navigation to drawn: cold {spread(layers['cold'])}, "
             f"warm {spread(layers['warm'])} (goal {verdict(LAYER_VIEW, results)}).",
             f"- **A layer opened** by a click on a cell, click to its head graph drawn: {spread(opened)} (goal "
             f"{verdict(OPENED_LAYER, results)}).",
             *floor_line(view, spread),
             *earlier_views(found.get("earlier_runs", []), spread),
             "", f"`python -m bench.circuits_scale --parts view` ({source(results, 'circuits_scale')})."]
    return "\n".join(lines) + "\n"


def floor_line(view: dict, spread) -> list[str]:
    """The floor's cold loads beside the matrix's (``bench.composition_view``), where the run measured them."""
    if "floor" not in view:
        return []
    floor, cold = view["floor"]["cold"], view["layers"]["cold"]
    loaded = f" Both pages loaded {view['plotly_js']}." if "plotly_js" in view else ""
    return [f"- **The floor**: a Dash page holding nothing but the same layer matrix, cold: {spread(floor)}; the view's "
            f"cold median is {cold['median_ms'] / floor['median_ms']:.2f}× the floor's, what any Dash page drawing this "
            f"figure pays on this machine (its renderer, React, Plotly's bundle).{loaded}"]


def earlier_views(runs: list[dict], spread) -> list[str]:
    views = [run for run in runs if run["part"] == "view"]
    if not views:
        return []
    return ["- **Earlier runs**, every one kept (the goals judge the latest): " + "; ".join(
        f"{run['date'][:10]} (load {run['load_average']['min']:.1f}–{run['load_average']['max']:.1f}): matrix cold "
        f"{spread(run['figures']['layers']['cold'])}, warm {spread(run['figures']['layers']['warm'])}, a layer opened "
        f"{spread(run['figures']['opened'])}" for run in views) + "."]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="the model and runs (default /tmp/qkviz-circuits-scale)")
    parser.add_argument("--parts", default="subsets,view")
    parser.add_argument("--every", default="16,8", help="the subsets: every K-th layer, for each K")
    parser.add_argument("--repeats", type=int, default=5, help="the view's rounds")
    parser.add_argument("--out", type=Path)
    args = smoke_arguments(parser, argv, every="1", repeats=1)
    args.dir = args.dir or (Path(tempfile.mkdtemp(prefix="qkviz-circuits-")) if args.smoke
                            else Path("/tmp/qkviz-circuits-scale"))
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    if set(parts) - set(PARTS):
        raise SystemExit(f"unknown parts {', '.join(sorted(set(parts) - set(PARTS)))}; choose from {', '.join(PARTS)}")
    args.dir.mkdir(parents=True, exist_ok=True)
    out = args.out or REPO / "bench" / "results" / "circuits_scale.json"
    previous = json.loads(out.read_text()) if out.exists() and not args.smoke else None
    recorder = Recorder("circuits_scale", vars(args), out)
    figures = {name: value for name, value in (previous or {}).get("figures", {}).items() if name in PARTS}
    figures["earlier_runs"] = replaced_runs(previous, parts)
    for part in parts:
        if part == "subsets":
            figures["subsets"] = subsets(prepared(args.dir, args.smoke), [int(k) for k in args.every.split(",")])
        elif part == "full":
            figures["full"] = full(prepared(args.dir, args.smoke))
        else:
            from bench.composition_view import time_view

            short = prepared(args.dir, args.smoke, "short", SHORT_DOCUMENTS)
            figures["view"] = time_view(short, args.repeats)
        recorder.write(**figures)
    print(f"written to {recorder.write(**figures)}")


if __name__ == "__main__":
    main()
