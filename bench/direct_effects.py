"""Direct-effects benchmark: how long ``run.direct_effects`` takes at one token against a bare forward pass of its
sequence, on the bundled SmolLM2 (issue 51's goal: at most as long).

    python -m bench.direct_effects [--run runs/direct-effects-smollm2] [--positions 5] [--rounds 3]
                                   [--device cpu] [--out bench/results/direct_effects.json]

Makes the run when it is missing: SmolLM2 over three passages of data/classics.txt of 10, 20 and 30 lines (from line
1,000, 0-based), about 200 to 500 tokens each. Then, in this process (the model loaded once and its load timed on its
own, one call made before any is timed), at ``--positions`` tokens of each of the three longest sequences (a fifth,
two fifths, ... of the way along, the last the last token with a next one), three ways in alternating order
(:func:`bench.harness.alternate`), ``--rounds`` rounds:

* **forward**: the bare forward pass of the whole sequence, ``model(input_ids)`` under ``torch.inference_mode()``,
  the same model object ``run.direct_effects`` uses, with its own attention implementation (the trace's attention
  calls the same kernel);
* **prefix forward**: the same up to the token (what the trace reads: a causal model's logit there reads no later
  token);
* **direct effects**: ``run.direct_effects(query)`` from the call to the table (target the next token).

The ratio is the direct effects' time over the forward pass's of the same round, one per round and token; the goal
is judged on their median. The load average is recorded at each token beside the header's. Every earlier run of the
file replaced is kept (``earlier_runs``) and listed on the page.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import torch  # noqa: E402

import qkviz  # noqa: E402
from qkviz.probes import run_language_model, sequence_ids  # noqa: E402

from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, model_name, source  # noqa: E402
from bench.harness import Recorder, alternate, kept_runs, load_span, smoke_arguments, summary  # noqa: E402

#: the passages: consecutive lines of data/classics.txt from FIRST_LINE (0-based), this many lines each
FIRST_LINE, PASSAGE_LINES = 1000, (10, 20, 30)
WAYS = ("forward", "prefix forward", "direct effects")


def make_run(path: Path, model: str, device: str) -> None:
    lines = (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()
    starts = FIRST_LINE + np.concatenate([[0], np.cumsum(PASSAGE_LINES)[:-1]])
    passages = [" ".join(lines[start:start + count]) for start, count in zip(starts, PASSAGE_LINES)]
    qkviz.extract(model, passages, path, device=device, progress=False)


def language_model(run, device: str):
    """``(model, model=)``: the model ``run.direct_effects`` uses, and what to pass it as ``model=``: None for the
    run's own, loaded once per process. A checkpoint saved without its head (the smoke run's tiny model) gets a
    causal language model on its weights, its head random, passed each call."""
    model = run_language_model(run, None, device, "direct effects")
    if model.get_output_embeddings() is not None:
        return model, None
    import transformers

    with_head = transformers.AutoModelForCausalLM.from_pretrained(run.manifest["model"]["id"]).to(device).eval()
    return with_head, with_head


def positions_of(n_tokens: int, count: int) -> list[int]:
    """``count`` positions spread along a sequence of ``n_tokens``: a ``1 / count`` of the way, ..., the last token
    with a next one; never the first token (a forward pass of one token times nothing but the call)."""
    last = n_tokens - 2
    return sorted({max(1, round(last * step / count)) for step in range(1, count + 1)})


def time_token(run, model, given, sentence: int, position: int, rounds: int, device: str) -> dict:
    """One token's three ways, alternating, and the paired ratios of each round."""
    rows = run.sentence_tokens(sentence)
    ids = torch.as_tensor(np.asarray(sequence_ids(run, sentence), dtype=np.int64), device=device)[None]
    query = rows.start + position

    def forward(length: int):
        with torch.inference_mode():
            model(input_ids=ids[:, :length])

    timed = alternate({"forward": lambda: forward(ids.shape[1]), "prefix forward": lambda: forward(position + 1),
                       "direct effects": lambda: run.direct_effects(query, model=given)}, rounds)
    ratio = [ours / theirs for ours, theirs in zip(timed["direct effects"]["values"], timed["forward"]["values"])]
    prefix = [ours / theirs for ours, theirs in zip(timed["direct effects"]["values"],
                                                    timed["prefix forward"]["values"])]
    found = {"sentence": sentence, "sequence_tokens": int(ids.shape[1]), "position": position, "query": query,
             **{way: timed[way] for way in WAYS}, "orders": timed["orders"], "ratio": summary(ratio),
             "prefix_ratio": summary(prefix), "load": [round(value, 2) for value in os.getloadavg()]}
    print(f"  sequence {sentence} ({found['sequence_tokens']} tokens), position {position}: forward "
          f"{timed['forward']['median']:.3f} s, prefix {timed['prefix forward']['median']:.3f} s, direct effects "
          f"{timed['direct effects']['median']:.3f} s; ratio {found['ratio']['median']:.2f} (load {found['load'][0]})")
    return found


def run_summary(result: dict) -> dict:
    """One run of this bench as ``earlier_runs`` keeps it: its date, load (lowest and highest 1-minute average),
    the ratios and each way's seconds over every token."""
    figures, load = result["figures"], result.get("load", {})
    return {"date": result["date"], "load_average": load_span(load, [token["load"][0] for token in figures["tokens"]]),
            "ratio": figures["ratio"], "prefix_ratio": figures["prefix_ratio"],
            "seconds": {way: figures["seconds"][way] for way in WAYS}}


#: what the smoke test adds to ``--smoke`` (a copy of a tiny run, its model saved as a directory)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "direct-effects-smollm2")
    parser.add_argument("--model", default="smollm2", help="the model a missing run is made from")
    parser.add_argument("--sequences", type=int, default=3, help="the longest sequences of the run timed")
    parser.add_argument("--positions", type=int, default=5, help="tokens timed per sequence")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/direct_effects.json)")
    args = smoke_arguments(parser, argv, out="out", sequences=2, positions=2, rounds=2)
    recorder = Recorder("direct_effects", vars(args), out=args.out)
    if not (args.run / "manifest.json").exists():
        make_run(args.run, args.model, args.device)
    run = qkviz.open_run(args.run)
    started = time.perf_counter()
    model, given = language_model(run, args.device)
    load_seconds = time.perf_counter() - started
    longest = np.argsort(-run.sentences.n_tokens.to_numpy(), kind="stable")[:args.sequences]
    run.direct_effects(run.sentence_tokens(int(longest[0])).start + 1, model=given)    # the adapter found once
    print(f"{run.model_id}: model loaded in {load_seconds:.1f} s ({model.config._attn_implementation} attention)")
    tokens = [time_token(run, model, given, int(sentence), position, args.rounds, args.device)
              for sentence in sorted(int(s) for s in longest)
              for position in positions_of(int(run.sentences.n_tokens.iat[int(sentence)]), args.positions)]
    figures = {"model": run.model_id, "attn_implementation": model.config._attn_implementation,
               "device": args.device, "load_seconds": round(load_seconds, 3), "tokens": tokens,
               "ratio": summary([value for token in tokens for value in token["ratio"]["values"]]),
               "prefix_ratio": summary([value for token in tokens for value in token["prefix_ratio"]["values"]]),
               "seconds": {way: summary([value for token in tokens for value in token[way]["values"]])
                           for way in WAYS}}
    print(f"  ratio (direct effects / forward, paired): {figures['ratio']['min']:.2f} / "
          f"{figures['ratio']['median']:.2f} / {figures['ratio']['max']:.2f}")
    figures["earlier_runs"] = kept_runs(recorder.out, run_summary)
    print(f"wrote {recorder.write(**figures)}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

DIRECT_EFFECTS_TIME = Goal("the direct effects at one token, against a bare forward pass of its sequence", 1.0, "×",
                           True, "direct_effects", "direct effects / forward of the same round, median",
                           lambda found: found["ratio"]["median"], 2)


@figure("direct-effects-speed")
def direct_effects_speed(results: Results) -> str:
    found = results("direct_effects")
    seconds, tokens = found["seconds"], found["tokens"]
    lengths = sorted({token["sequence_tokens"] for token in tokens})
    ratio, prefix = found["ratio"], found["prefix_ratio"]
    lines = [f"On {model_name(found['model'])}, {found['device']} ({found['attn_implementation']} attention, the model loaded "
             f"once): {len(tokens)} tokens of {len(lengths)} sequences of "
             f"{', '.join(f'{n:,}' for n in lengths)} tokens, {tokens[0]['forward']['runs']} rounds each, the three "
             "ways in alternating order (min / median / max over every round):",
             "",
             f"- **A bare forward pass** of the token's sequence: {span_s(seconds['forward'])}; up to the token "
             f"(what the split reads): {span_s(seconds['prefix forward'])}.",
             f"- **`run.direct_effects(query)`**, call to table: {span_s(seconds['direct effects'])}.",
             f"- **Ratio**, direct effects over the forward pass of the same round: {span_x(ratio)} (goal "
             f"{verdict(DIRECT_EFFECTS_TIME, results)}); over the forward pass up to the token: {span_x(prefix)}."]
    if found.get("earlier_runs"):
        lines.append("- **Earlier runs**, every one kept (the goal above judges the latest): "
                     + "; ".join(earlier(run) for run in found["earlier_runs"]) + ".")
    lines += ["", f"`python -m bench.direct_effects` ({source(results, 'direct_effects')})."]
    return "\n".join(lines) + "\n"


def span_s(values: dict) -> str:
    return f"{values['min']:.2f} / {values['median']:.2f} / {values['max']:.2f} s"


def span_x(values: dict) -> str:
    return f"{values['min']:.2f} / {values['median']:.2f} / {values['max']:.2f}×"


def earlier(run: dict) -> str:
    load = run.get("load_average")
    where = f"load {load['min']:.1f}–{load['max']:.1f}" if load else "load not recorded"
    return (f"{run['date'][:10]} ({where}): ratio {span_x(run['ratio'])}, up to the token "
            f"{span_x(run['prefix_ratio'])}")


if __name__ == "__main__":
    main()
