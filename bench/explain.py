"""Query-key attribution benchmark: how long ``run.explain`` and ``run.circuit`` take on the bundled SmolLM2.

    python -m bench.explain [--run runs/explain-smollm2] [--pairs 5] [--budget 5000] [--all-heads]
                            [--device cpu] [--out bench/results/explain.json]

Makes the run when it is missing: SmolLM2 over six 40-line passages of data/classics.txt in windows of 1,000
tokens. Then, in this process (the model loaded once, its load timed on its own):

* **one pair**: ``run.explain(L, H, i, j)`` for ``--pairs`` pairs of the first 1,000-token window (a seeded random
  head and pair each time; wall time from the call to the table), min / median / max;
* **one head's circuit**: ``run.circuit`` of a seeded random head and of the last layer's first head (the most
  parts), over ``--budget`` tokens: its three sides, query, key and value (V-composition), from one pass (the value
  side is not timed apart: it comes from the same backward pass as the others);
* **every head's circuit** (``--all-heads``): ``qkviz.explain.compute_circuits`` over ``--budget`` tokens, as
  ``qkviz stats --circuits`` does, every head's three sides;
* memory, **measured**: the peak resident memory of each step (the model's load, the pairs, each head's circuit,
  every head's circuit), the process's high-water mark (``VmHWM``) read after the step, reset before it (``5`` written
  to ``/proc/self/clear_refs``), and the process's peak over the whole bench (``ru_maxrss``); beside them,
  **computed** (not measured), the largest block of parts a chunk holds (parts x tokens of one chunk x head size,
  float64) and what a parts x tokens x width tensor of the whole sample would take.

Goals (issue 37): one pair within 1 s, one head's circuit over 5,000 tokens within 60 s, all 270 heads within 30 min
(wall time, 2 cores); (issue 51) one head's V-composition over 5,000 tokens within 60 s and all 270 heads' three-sided
circuits within 30 min, judged on runs whose circuits have the value side (``sides`` in the result file; the runs
before it measured the query and key sides only, and the page says which each run measured). Writes
``bench/results/explain.json`` (``--out``), keeping every earlier run's figures and load (``earlier_runs``, carried
from the file it replaces): the goals are judged on the latest run, and the page lists every run
(:func:`every_run`).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402

import qkviz  # noqa: E402
from qkviz.explain import CHUNK_TOKENS, compute_circuits  # noqa: E402
from qkviz.probes import run_model  # noqa: E402

from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, source  # noqa: E402
from bench.harness import Recorder, kept_runs, load_span, smoke_arguments, summary  # noqa: E402

#: the passages: 40 lines each of data/classics.txt, the first six
PASSAGES, LINES_PER_PASSAGE, WINDOW = 6, 40, 1000
#: a circuit's sides, as its table names them
SIDES = ("query", "key", "value")


def make_run(path: Path, model: str, device: str) -> None:
    lines = (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()
    passages = ["\n".join(lines[start:start + LINES_PER_PASSAGE])
                for start in range(0, PASSAGES * LINES_PER_PASSAGE, LINES_PER_PASSAGE)]
    qkviz.extract(model, passages, path, chunk=WINDOW, chunk_overlap=0, device=device)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_high_water() -> bool:
    """Reset this process's resident high-water mark (``VmHWM``) to what it holds now; False where Linux refuses."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def high_water_mb() -> float | None:
    """This process's resident high-water mark since the last reset (MB), or None outside Linux."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def step_peak(peaks: dict, name: str, work):
    """Run ``work()`` and record its measured peak resident memory under ``name`` (None where the high-water mark
    cannot be reset: a peak before the step would be counted)."""
    resettable = reset_high_water()
    result = work()
    peaks[name] = round(high_water_mb(), 1) if resettable and high_water_mb() is not None else None
    return result


def time_pairs(run, n_pairs: int, device: str, seed: int) -> dict:
    """Wall seconds of ``run.explain`` for seeded random heads and pairs of the longest window."""
    rng = np.random.default_rng(seed)
    sentence = int(np.argmax(run.sentences.n_tokens.to_numpy()))
    rows = run.sentence_tokens(sentence)
    seconds, asked = [], []
    for _ in range(n_pairs):
        layer, head = int(rng.integers(run.n_layers)), int(rng.integers(run.n_heads))
        query = int(rng.integers(rows.start + 1, rows.stop))
        key = int(rng.integers(rows.start, query + 1)) if run.is_causal else int(rng.integers(rows.start, rows.stop))
        started = time.perf_counter()
        frame = run.explain(layer, head, query, key, device=device)
        seconds.append(time.perf_counter() - started)
        asked.append({"layer": layer, "head": head, "query": query, "key": key, "rows": len(frame)})
        print(f"  pair L{layer}H{head} {query}x{key}: {seconds[-1]:.3f} s ({len(frame)} rows)")
    return {"sequence_tokens": rows.stop - rows.start, "seconds": summary(seconds), "pairs": asked}


def time_circuit(run, layer: int, head: int, budget: int, device: str) -> dict:
    started = time.perf_counter()
    circuit = run.circuit(layer, head, budget=budget, device=device)
    seconds = time.perf_counter() - started
    print(f"  circuit L{layer}H{head} over {circuit.sample['n_tokens']:,} tokens: {seconds:.1f} s; {circuit.summary}")
    return {"layer": layer, "head": head, "seconds": round(seconds, 3), "tokens": circuit.sample["n_tokens"],
            "n_parts": int((circuit.table.side == "key").sum()), "summary": circuit.summary,
            "sides": [side for side in SIDES if (circuit.table.side == side).any()]}


def largest_block_mb(run, n_parts: int, chunk_tokens: int) -> float:
    """The largest parts block one chunk holds: every part's vector of the residual stream at the chunk's tokens
    (float64; the stream's width taken as heads x head size, as in SmolLM2)."""
    return n_parts * run.n_heads * chunk_tokens * run.head_dim * 8 / 2**20


def run_summary(result: dict) -> dict:
    """One run of this bench as ``earlier_runs`` keeps it: its date, load (lowest and highest 1-minute average of its
    header), the model's load, the pairs, each circuit's and every head's seconds, and the measured peaks."""
    figures, load = result["figures"], result.get("load", {})
    return {"date": result["date"], "load_average": load_span(load),
            "model_load_s": figures["load_seconds"], "pair_s": figures["pair"]["seconds"],
            "circuits_s": {f"L{c['layer']}H{c['head']}": c["seconds"] for c in figures["circuits"]},
            "all_heads_s": figures.get("all_heads", {}).get("seconds"),
            "sides": figures["circuits"][0].get("sides", ["query", "key"]),
            "peak_mb": figures["memory"]["peak_mb"], "step_peak_mb": figures["memory"].get("step_peak_mb")}


#: what the smoke test adds to ``--smoke`` (a copy of a tiny run, its model saved as a directory)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "explain-smollm2")
    parser.add_argument("--model", default="smollm2", help="the model a missing run is made from")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--budget", type=int, default=5000)
    parser.add_argument("--all-heads", action="store_true", help="also every head's circuit (compute_circuits)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/explain.json)")
    args = smoke_arguments(parser, argv, out="out", pairs=2, budget=60, all_heads=True)
    recorder = Recorder("explain", vars(args), out=args.out)
    if not (args.run / "manifest.json").exists():
        make_run(args.run, args.model, args.device)
    run = qkviz.open_run(args.run)
    peaks: dict[str, float | None] = {}
    started = time.perf_counter()
    step_peak(peaks, "model load", lambda: run_model(run, device=args.device))
    load_seconds = time.perf_counter() - started
    print(f"{run.model_id}: {run.n_layers}x{run.n_heads} heads, {run.n_tokens:,} tokens; model loaded and "
          f"checked in {load_seconds:.1f} s")
    pairs = step_peak(peaks, "pairs", lambda: time_pairs(run, args.pairs, args.device, args.seed))
    rng = np.random.default_rng(args.seed + 1)
    chosen = [(int(rng.integers(run.n_layers)), int(rng.integers(run.n_heads))), (run.n_layers - 1, 0)]
    circuits = [step_peak(peaks, f"circuit L{layer}H{head}",
                          lambda layer=layer, head=head: time_circuit(run, layer, head, args.budget, args.device))
                for layer, head in chosen]
    figures = {"model": run.model_id, "heads": run.n_layers * run.n_heads, "run_tokens": run.n_tokens,
               "load_seconds": round(load_seconds, 3), "pair": pairs, "circuits": circuits}
    if args.all_heads:
        started = time.perf_counter()
        table = step_peak(peaks, "every head's circuit",
                          lambda: compute_circuits(run, budget=args.budget, device=args.device, progress=False))
        seconds = time.perf_counter() - started
        figures["all_heads"] = {"seconds": round(seconds, 3), "heads": run.n_layers * run.n_heads,
                                "tokens": qkviz.open_run(args.run).circuits.attrs["sample"]["n_tokens"],
                                "sides": [side for side in SIDES if (table.side == side).any()]}
        print(f"  every head's circuit: {seconds:.1f} s")
    most_parts = max(circuit["n_parts"] for circuit in circuits)
    sample_tokens = max(circuit["tokens"] for circuit in circuits)
    # measured: the whole process's peak and each step's; computed: the parts' blocks (labelled so on the page)
    figures["memory"] = {"peak_mb": round(peak_mb(), 1), "step_peak_mb": peaks,
                         "largest_parts_block_mb": round(largest_block_mb(run, most_parts, CHUNK_TOKENS), 1),
                         "whole_sample_parts_mb": round(most_parts * sample_tokens * run.n_heads * run.head_dim * 8
                                                        / 2**20, 1)}
    print(f"  peak RSS {figures['memory']['peak_mb']:,.0f} MB (measured); each step's, measured: "
          + ", ".join(f"{name} {'not measured' if peak is None else f'{peak:,.0f} MB'}" for name, peak in peaks.items())
          + f"; largest parts block, computed: {figures['memory']['largest_parts_block_mb']:,.0f} MB")
    figures["earlier_runs"] = kept_runs(recorder.out, run_summary)
    print(f"wrote {recorder.write(**figures)}")


# The figure blocks drawn from this bench's result file (``python -m bench.figures``).

PAIR_TIME = Goal("one pair explained on SmolLM2 in a 1,000-token window, the model loaded", 1, "s", True,
                 "explain", "call to table, median", lambda found: found["pair"]["seconds"]["median"], 2)
CIRCUIT_TIME = Goal("one head's circuit over 5,000 tokens", 60, "s", True, "explain",
                    "wall time, the slowest head measured", lambda found: max(c["seconds"] for c in found["circuits"]))
ALL_CIRCUITS_TIME = Goal("every SmolLM2 head's circuit over 5,000 tokens", 30, "min", True, "explain",
                         "wall time", lambda found: found["all_heads"]["seconds"] / 60 if "all_heads" in found
                         else None)


def three_sided(measured: dict) -> bool:
    """Whether a measured circuit (or every head's) has the value side: runs before issue 51 had two sides."""
    return "value" in measured.get("sides", ())


V_COMPOSITION_TIME = Goal("one head's V-composition over 5,000 tokens", 60, "s", True, "explain",
                          "wall time of the head's circuit, its three sides from one pass, the slowest head measured",
                          lambda found: max(c["seconds"] for c in found["circuits"])
                          if all(three_sided(c) for c in found["circuits"]) else None)
ALL_THREE_SIDED_TIME = Goal("all 270 heads' three-sided circuits", 30, "min", True, "explain",
                            "wall time, every head's query, key and value sides",
                            lambda found: found["all_heads"]["seconds"] / 60
                            if three_sided(found.get("all_heads", {})) else None)


@figure("explain-speed")
def explain_speed(results: Results) -> str:
    found = results("explain")
    pair = found["pair"]
    seconds = pair["seconds"]
    lines = [f"On {found['model']} ({found['heads']} heads), {found['arguments']['device']}: the model loaded and "
             f"checked against the run in {found['load_seconds']:.1f} s, once per process.",
             "",
             f"- **One pair** in a {pair['sequence_tokens']:,}-token window, {seconds['runs']} seeded random heads "
             f"and pairs: {seconds['min']:.2f} / {seconds['median']:.2f} / {seconds['max']:.2f} s "
             f"(min / median / max; goal {verdict(PAIR_TIME, results)}).",
             "- **One head's circuit** over "
             + "; ".join(f"L{c['layer']}H{c['head']} ({c['n_parts']} parts) {c['tokens']:,} tokens: {c['seconds']:.1f} s"
                         for c in found["circuits"])
             + f" (the first head seeded random, the second the last layer's first: the most parts; "
               f"{sides_measured(found['circuits'][0])}; goal {verdict(CIRCUIT_TIME, results)}"
             + (f"; V-composition goal {verdict(V_COMPOSITION_TIME, results)}"
                if all(three_sided(c) for c in found["circuits"]) else "") + ")."]
    if "all_heads" in found:
        every = found["all_heads"]
        lines.append(f"- **Every head's circuit** ({every['heads']} heads, {every['tokens']:,} tokens, "
                     f"{sides_measured(every)}): {every['seconds'] / 60:.1f} min (goal "
                     f"{verdict(ALL_CIRCUITS_TIME, results)}"
                     + (f"; three-sided goal {verdict(ALL_THREE_SIDED_TIME, results)}" if three_sided(every) else "")
                     + ").")
    lines.append(memory_line(found["memory"]))
    if found.get("earlier_runs"):
        lines.append(every_run(found["earlier_runs"]))
    lines.append("")
    lines.append(f"`python -m bench.explain` ({source(results, 'explain')}).")
    return "\n".join(lines) + "\n"


def sides_measured(measured: dict) -> str:
    """"the query, key and value sides" or "the query and key sides" (runs before issue 51)."""
    return ("the query, key and value sides, one pass" if three_sided(measured)
            else "the query and key sides only (before the value side)")


def every_run(runs: list[dict]) -> str:
    """The earlier runs kept in the result file, oldest first, each with its load: the goals above judge the latest."""
    def one(run: dict) -> str:
        load = run.get("load_average")
        where = f"load {load['min']:.1f}–{load['max']:.1f}" if load else "load not recorded"
        pair = run["pair_s"]
        circuits = " / ".join(f"{seconds:.1f}" for seconds in run["circuits_s"].values())
        every = "" if run.get("all_heads_s") is None else f", every head's circuit {run['all_heads_s'] / 60:.1f} min"
        sides = "three sides" if "value" in run.get("sides", ()) else "two sides"
        return (f"{run['date'][:10]} ({where}): the model loaded in {run['model_load_s']:.1f} s, one pair "
                f"{pair['min']:.2f} / {pair['median']:.2f} / {pair['max']:.2f} s, circuits ({sides}) {circuits} s"
                f"{every}, peak {run['peak_mb']:,.0f} MB")
    return ("- **Earlier runs**, every one kept (the goals above judge the latest): "
            + "; ".join(one(run) for run in runs) + ".")


def memory_line(memory: dict) -> str:
    """The memory figures as measured (the process's peak, each step's where the file holds them), the parts'
    blocks beside them labelled as computed."""
    steps = memory.get("step_peak_mb") or {}
    measured = "; ".join(f"{name} {peak:,.0f} MB" for name, peak in steps.items() if peak is not None)
    return (f"- **Memory, measured** (peak resident memory): the whole process {memory['peak_mb']:,.0f} MB"
            + (f"; its peak during each step (the high-water mark reset before the step, so a step's figure holds "
               f"what the process held then, the model among it): {measured}" if measured else
               "; no step's peak in this result file")
            + f". **Computed**, not measured: the largest block of parts one chunk of tokens would hold, "
            f"{memory['largest_parts_block_mb']:,.0f} MB, where the whole sample's parts would take "
            f"{memory['whole_sample_parts_mb']:,.0f} MB.")


if __name__ == "__main__":
    main()
