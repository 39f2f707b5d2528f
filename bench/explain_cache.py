"""Explanations from a traced stream: a document's first pair against a bare forward pass of it, its later pairs
answered from the kept trace, and the trace's memory, on the bundled SmolLM2 (issue 53's goals: the first pair at most
1.0x the forward pass, later pairs at most 0.1x, median).

    python -m bench.explain_cache [--run runs/explain-cache-smollm2] [--pairs 6] [--rounds 2]
                                  [--device cpu] [--out bench/results/explain_cache.json]

Makes the run when it is missing: SmolLM2 over one held-out document, data/classics.txt from line 3100 (0-based;
text no default was tuned on), in windows of 1,000 tokens; the first window is the document timed. Then, in this
process (the model loaded once, its load timed on its own; one explanation of another window made first, so that
the family's adapter is found before anything is timed), ``--rounds`` rounds, each from an empty cache
(``qkviz.explain.clear_traces``):

* **forward**: the bare forward pass of the whole window, ``model(input_ids)`` under ``torch.inference_mode()``,
  the model object ``run.explain`` uses;
* **first pair**: ``run.explain(L, H, i, j)`` from the call to the table, its trace not yet made (a seeded random
  head and pair of the window), then ``--pairs`` **later pairs** in the same window (other seeded random heads at
  other layers; a pair deeper than every one before traces the window again, to the last layer, and counts as it is);
* each pair timed in alternating order with a forward pass of its own (pair, forward; forward, pair; ...): its ratio
  is over that forward pass; the goals are judged on the median ratio of the first pairs and of the later pairs;
* the trace's memory, **measured**: the bytes of the tensors the cache holds (each storage once,
  ``trace_memory_state()["used"]``), and the process's resident memory (``/proc/self/statm``) before the first pair,
  after it (the trace kept), and after the cache is cleared (the trace freed), each after a garbage collection.

The load average is recorded with every pair. Every earlier run of the file replaced is kept (``earlier_runs``) and
listed on the page.
"""

from __future__ import annotations

import argparse
import gc
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import torch  # noqa: E402

import qkviz  # noqa: E402
from qkviz.explain import clear_traces, trace_memory_state  # noqa: E402
from qkviz.probes import run_model, sequence_ids  # noqa: E402

from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, model_name, source  # noqa: E402
from bench.harness import Recorder, kept_runs, load_span, smoke_arguments, summary  # noqa: E402

#: the held-out document: data/classics.txt from this line (0-based), this many lines, in windows of WINDOW tokens
FIRST_LINE, LINES, WINDOW = 3100, 120, 1000


def make_run(path: Path, model: str, device: str) -> None:
    lines = (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()
    document = "\n".join(lines[FIRST_LINE:FIRST_LINE + LINES])
    qkviz.extract(model, [document], path, chunk=WINDOW, chunk_overlap=0, device=device, progress=False)


def resident_mb() -> float:
    """The process's resident memory now (MB), after a garbage collection."""
    gc.collect()
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def random_pair(run, rows: slice, rng: np.random.Generator) -> dict:
    """A seeded random head and a pair of the window its mask allows (a causal model's key at or before the query)."""
    layer, head = int(rng.integers(run.n_layers)), int(rng.integers(run.n_heads))
    query = int(rng.integers(rows.start + 1, rows.stop))
    key = int(rng.integers(rows.start, query + 1)) if run.is_causal else int(rng.integers(rows.start, rows.stop))
    return {"layer": layer, "head": head, "query": query, "key": key}


def paired(pair: dict, run, forward, device: str, pair_first: bool) -> dict:
    """One pair and one forward pass, in the order given: each one's seconds, their ratio and the load."""
    def explain():
        started = time.perf_counter()
        run.explain(pair["layer"], pair["head"], pair["query"], pair["key"], device=device)
        return time.perf_counter() - started

    def bare():
        started = time.perf_counter()
        forward()
        return time.perf_counter() - started

    hits = trace_memory_state()["hits"]
    if pair_first:
        seconds, forward_s = explain(), bare()
    else:
        forward_s, seconds = bare(), explain()
    return {**pair, "seconds": round(seconds, 3), "forward_s": round(forward_s, 3),
            "ratio": round(seconds / forward_s, 4), "order": "pair, forward" if pair_first else "forward, pair",
            "from_trace": trace_memory_state()["hits"] > hits, "load": round(os.getloadavg()[0], 2)}


def one_round(run, forward, rows: slice, n_pairs: int, device: str, rng: np.random.Generator, round_: int) -> dict:
    clear_traces()
    before = resident_mb()
    first = paired(random_pair(run, rows, rng), run, forward, device, pair_first=round_ % 2 == 0)
    after_first = resident_mb()
    held_first = trace_memory_state()["used"]
    later = [paired(random_pair(run, rows, rng), run, forward, device, pair_first=(round_ + index) % 2 == 1)
             for index in range(n_pairs)]
    state = trace_memory_state()
    held = state["used"]
    clear_traces()
    after_clear = resident_mb()
    found = {"first": first, "later": later, "held_bytes_after_first": held_first, "held_bytes": held,
             "traces_held": len(state["held"]),
             "resident_mb": {"before": round(before, 1), "after_first": round(after_first, 1),
                             "after_clear": round(after_clear, 1)}}
    print(f"  round {round_}: first pair L{first['layer']}H{first['head']} {first['seconds']:.2f} s / forward "
          f"{first['forward_s']:.2f} s = {first['ratio']:.2f}x; later pairs "
          + ", ".join(f"L{p['layer']} {p['ratio']:.3f}x{'' if p['from_trace'] else ' (traced deeper)'}"
                      for p in later)
          + f"; held {held / 2**20:,.0f} MB, resident +{after_first - before:,.0f} MB after the first pair, "
          f"-{after_first - after_clear:,.0f} MB once cleared (load {first['load']})")
    return found


def run_summary(result: dict) -> dict:
    """One run of this bench as ``earlier_runs`` keeps it: its date, load and the two ratios' summaries."""
    figures, load = result["figures"], result.get("load", {})
    return {"date": result["date"], "load_average": load_span(load),
            "first_ratio": figures["first_ratio"], "later_ratio": figures["later_ratio"],
            "held_mb": figures["memory"]["held_mb"]}


#: what the smoke test adds to ``--smoke`` (a copy of a tiny run, its model saved as a directory)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "explain-cache-smollm2")
    parser.add_argument("--model", default="smollm2", help="the model a missing run is made from")
    parser.add_argument("--pairs", type=int, default=6, help="later pairs per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/explain_cache.json)")
    args = smoke_arguments(parser, argv, out="out", pairs=2, rounds=2)
    recorder = Recorder("explain_cache", vars(args), out=args.out)
    if not (args.run / "manifest.json").exists():
        make_run(args.run, args.model, args.device)
    run = qkviz.open_run(args.run)
    started = time.perf_counter()
    model = run_model(run, device=args.device)
    load_seconds = time.perf_counter() - started
    lengths = run.sentences.n_tokens.to_numpy()
    sentence = int(np.argmax(lengths))
    rows = run.sentence_tokens(sentence)
    ids = torch.as_tensor(np.asarray(sequence_ids(run, sentence), dtype=np.int64), device=args.device)[None]

    def forward():
        with torch.inference_mode():
            model(input_ids=ids)

    other = run.sentence_tokens(int(np.argmin(lengths)))         # the adapter found, before anything is timed
    run.explain(0, 0, other.stop - 1, other.start, device=args.device)
    forward()
    print(f"{run.model_id}: model loaded in {load_seconds:.1f} s; window of {rows.stop - rows.start:,} tokens "
          f"({model.config._attn_implementation} attention)")
    rng = np.random.default_rng(args.seed)
    rounds = [one_round(run, forward, rows, args.pairs, args.device, rng, index) for index in range(args.rounds)]
    first = [found["first"]["ratio"] for found in rounds]
    later = [pair["ratio"] for found in rounds for pair in found["later"]]
    figures = {"model": run.model_id, "device": args.device, "attn_implementation": model.config._attn_implementation,
               "load_seconds": round(load_seconds, 3), "sequence_tokens": rows.stop - rows.start, "rounds": rounds,
               "first_ratio": summary(first, 4), "later_ratio": summary(later, 4),
               "forward_s": summary([pair["forward_s"] for found in rounds
                                     for pair in (found["first"], *found["later"])]),
               "first_s": summary([found["first"]["seconds"] for found in rounds]),
               "later_s": summary([pair["seconds"] for found in rounds for pair in found["later"]]),
               "memory": {"held_mb": summary([found["held_bytes"] / 2**20 for found in rounds], 1),
                          "resident_added_mb": summary([found["resident_mb"]["after_first"]
                                                        - found["resident_mb"]["before"] for found in rounds], 1),
                          "resident_freed_mb": summary([found["resident_mb"]["after_first"]
                                                        - found["resident_mb"]["after_clear"] for found in rounds], 1),
                          "budget_mb": round(trace_memory_state()["budget"] / 2**20, 1)}}
    print(f"  first pair / forward {figures['first_ratio']['median']:.2f}x (median), later pairs / forward "
          f"{figures['later_ratio']['median']:.3f}x (median); held {figures['memory']['held_mb']['max']:,.0f} MB")
    figures["earlier_runs"] = kept_runs(recorder.out, run_summary)
    print(f"wrote {recorder.write(**figures)}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

FIRST_PAIR = Goal("a document's first pair explained, against a bare forward pass of it", 1.0, "×", True,
                  "explain_cache", "first pair / forward of its own pairing, median over rounds",
                  lambda found: found["first_ratio"]["median"], 2)
LATER_PAIRS = Goal("a later pair of the same document, answered from its trace", 0.1, "×", True, "explain_cache",
                   "later pair / forward of its own pairing, median", lambda found: found["later_ratio"]["median"], 3)


def span_x(values: dict, digits: int = 2) -> str:
    return f"{values['min']:.{digits}f} / {values['median']:.{digits}f} / {values['max']:.{digits}f}×"


def span_s(values: dict) -> str:
    return f"{values['min']:.2f} / {values['median']:.2f} / {values['max']:.2f} s"


def span_mb(values: dict) -> str:
    return f"{values['min']:,.0f} / {values['median']:,.0f} / {values['max']:,.0f} MB"


@figure("explain-cache")
def explain_cache(results: Results) -> str:
    found = results("explain_cache")
    rounds, memory = found["rounds"], found["memory"]
    later = [pair for round_ in rounds for pair in round_["later"]]
    deeper = sum(not pair["from_trace"] for pair in later)
    lines = [f"On {model_name(found['model'])}, {found['device']} ({found['attn_implementation']} attention, the model "
             f"loaded once), a held-out window of {found['sequence_tokens']:,} tokens, {len(rounds)} rounds from an "
             f"empty cache, each pair timed in alternating order with a bare forward pass of the window "
             f"(min / median / max):",
             "",
             f"- **A bare forward pass**: {span_s(found['forward_s'])}.",
             f"- **The first pair** (the window traced, up to the head's layer): {span_s(found['first_s'])}; over "
             f"the forward pass of its pairing {span_x(found['first_ratio'])} (goal {verdict(FIRST_PAIR, results)}).",
             f"- **Later pairs** ({len(later)}, seeded random heads at other layers; {deeper} of them deeper than "
             f"every pair before, which traces the window again to the last layer): {span_s(found['later_s'])}; "
             f"over the forward pass of its pairing {span_x(found['later_ratio'], 3)} (goal "
             f"{verdict(LATER_PAIRS, results)}).",
             f"- **The trace's memory, measured**: the tensors the cache holds after the round's pairs "
             f"{span_mb(memory['held_mb'])} (budget {memory['budget_mb']:,.0f} MB); the process's resident memory "
             f"grew by {span_mb(memory['resident_added_mb'])} with the first pair's trace, and fell by "
             f"{span_mb(memory['resident_freed_mb'])} when the cache was cleared."]
    if found.get("earlier_runs"):
        lines.append("- **Earlier runs**, every one kept (the goals above judge the latest): "
                     + "; ".join(earlier(run) for run in found["earlier_runs"]) + ".")
    lines += ["", f"`python -m bench.explain_cache` ({source(results, 'explain_cache')})."]
    return "\n".join(lines) + "\n"


def earlier(run: dict) -> str:
    load = run.get("load_average")
    where = f"load {load['min']:.1f}–{load['max']:.1f}" if load else "load not recorded"
    return (f"{run['date'][:10]} ({where}): first pair {span_x(run['first_ratio'])}, later pairs "
            f"{span_x(run['later_ratio'], 3)}, held {span_mb(run['held_mb'])}")


if __name__ == "__main__":
    main()
