"""What ``attn-tsne`` can reach on a head, at any same-kind weight: ``python -m bench.faithful_frontier --model minilm``.

``bench.faithful_ceiling`` judges the default layout, which chooses its own same-kind weight ``alpha`` per head. This
bench asks the question above it: on each held-out head, is there **any** weight at which the layout keeps partner
recall@10 at least :data:`~qkviz.neighbours.RECALL_GOAL` and at least :data:`~bench.faithful_ceiling.CEILING_SHARE`
of plain t-SNE's trustworthiness, both? Where there is none, no fixed weight meets the goal on that head, and closing
it needs another layout rather than another choice of weight. (The trade's own path -- a fit at its starting weight,
then a few iterations at each step from there -- is not one of these fits, and now and then meets the goal on a head
that none of them meets: the figure is about the most one fixed weight per head gives, not a strict bound.)

Per head (drawn as ``bench.faithful_ceiling`` draws them: ``default_rng(--seed)`` over all layers and heads, the same
held-out run), the layout at each weight of :data:`ALPHAS` (the trade off, ``recall_target`` 0; every other setting
the default), its recall, trustworthiness and share of the ceiling's. The ceiling (openTSNE's defaults, seeded) is
read from ``bench.faithful_ceiling``'s result for the same run and seed where it holds the head (``--ceilings``; the
same points, seed and sample give the same figure), else computed. Beside it, how concentrated the head's partners
are: the share of every query's ``k`` partner slots that the :data:`HUBS` most-listed keys hold, and the same of the
keys' slots held by the most-listed queries -- a head whose queries all name the same few keys asks a 2D picture to
order those few keys differently for thousands of queries.

Writes ``bench/results/faithful_frontier_<model>.json`` (``--out``) after every head, ``complete`` false until the
last.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from bench.faithful_ceiling import (CEILING_SHARE, GOAL_HEADS, K, SMOKE_VALUES, attn_layout,  # noqa: E402
                                    ceiling_layout, head_scorer, held_out_arguments, held_out_run)
from bench.faithful_sample import random_heads
from bench.harness import RESULTS, Recorder, kept_runs, smoke_arguments

from qkviz.neighbours import RECALL_GOAL, top_logits

#: the same-kind weights tried on every head: from a sixteenth of the default (near the attention graph alone) to
#: eight times it (the trade's highest)
ALPHAS = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
#: the most-listed partners whose share of all partner slots measures how concentrated a head's partners are
HUBS = 50


def hub_shares(queries: np.ndarray, keys: np.ndarray, rule) -> dict:
    """The share of all queries' ``K`` partner slots held by the :data:`HUBS` most-listed keys (``query``), and of
    all keys' slots held by the most-listed queries (``key``), with how many distinct partners fill them."""
    out = {}
    for side, own, other in (("query", queries, keys), ("key", keys, queries)):
        partners, _ = top_logits(own, other, K, rule)
        listed = np.sort(np.bincount(partners.ravel(), minlength=len(other)))[::-1]
        out[side] = {"hub_share": float(listed[:HUBS].sum() / listed.sum()), "distinct": int(np.count_nonzero(listed))}
    return out


def known_ceilings(path: Path | None, tokens: int) -> dict[tuple[int, int], dict]:
    """``(layer, head) -> ceiling row`` from a ``bench.faithful_ceiling`` result over a run of ``tokens`` tokens."""
    if path is None or not path.exists():
        return {}
    figures = json.loads(path.read_text(encoding="utf-8"))["figures"]
    if figures.get("tokens") != tokens:
        return {}
    return {(row["layer"], row["head"]): row["ceiling"] for row in figures["rows"]}


def measure_head(run, layer: int, head: int, seed: int, trust_points: int, ceiling: dict | None) -> dict:
    points, scores = head_scorer(run, layer, head, seed, trust_points)
    if ceiling is None:
        coordinates, seconds = ceiling_layout(points, seed)
        ceiling = {**scores(coordinates), "seconds": round(seconds, 2), "read": False}
    else:
        ceiling = {**ceiling, "read": True}
    weights = []
    for alpha in ALPHAS:
        coordinates, seconds, _ = attn_layout(run, layer, head, points, {"alpha": alpha, "recall_target": 0.0})
        found = scores(coordinates)
        share = found["trust"] / ceiling["trust"]
        weights.append({"alpha": alpha, **found, "trust_share": share, "seconds": round(seconds, 2),
                        "meets": bool(found["recall"] >= RECALL_GOAL and share >= CEILING_SHARE)})
    kept = [weight["recall"] for weight in weights if weight["trust_share"] >= CEILING_SHARE]
    hubs = hub_shares(run.queries(layer, head), run.keys(layer, head), run.logit_rule(layer, head))
    return {"layer": layer, "head": head, "ceiling": ceiling, "weights": weights, "hubs": hubs,
            "best_recall_at_share": max(kept) if kept else None, "reachable": any(w["meets"] for w in weights),
            "highest_recall": max(weight["recall"] for weight in weights)}


def summary(rows: list[dict]) -> dict:
    reachable = [row for row in rows if row["reachable"]]
    return {"heads": len(rows), "reachable": len(reachable),
            "recall_reachable": sum(row["highest_recall"] >= RECALL_GOAL for row in rows),
            "hub_share_reachable": [round(row["hubs"]["query"]["hub_share"], 3) for row in reachable],
            "hub_share_unreachable": [round(row["hubs"]["query"]["hub_share"], 3) for row in rows
                                      if not row["reachable"]]}


def run_summary(result: dict) -> dict:
    figures = result["figures"]
    return {"date": result["date"], "heads": len(figures["rows"]), **{key: figures["summary"][key]
                                                                       for key in ("reachable", "recall_reachable")}}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run)
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ceilings", type=Path, help="bench.faithful_ceiling's result for the same run and seed "
                        "(default: its file for --model and --seed)")
    held_out_arguments(parser)
    args = smoke_arguments(parser, argv, out="out", dir=Path(tempfile.mkdtemp(prefix="qkviz-smoke-")), **SMOKE_VALUES)
    run, corpus, model, heads = held_out_run(args)
    suffix = "" if args.seed == 0 else f"_seed{args.seed}"
    ceilings_file = args.ceilings or (None if args.smoke else RESULTS / f"faithful_ceiling_{model}{suffix}.json")
    ceilings = known_ceilings(ceilings_file, run.n_tokens)
    out = args.out or RESULTS / f"faithful_frontier_{model}{suffix}.json"
    recorder = Recorder("faithful_frontier", vars(args), out)
    drawn = [(layer, head) for layer, head, _ in random_heads(run, heads, args.seed)]
    rows, earlier = [], kept_runs(out, run_summary) if not args.smoke else []
    for layer, head in drawn:
        rows.append(measure_head(run, layer, head, args.seed, args.trust_sample, ceilings.get((layer, head))))
        row = rows[-1]
        print(f"  L{layer} H{head}: ceiling {row['ceiling']['trust']:.3f}, hubs {row['hubs']['query']['hub_share']:.2f}; "
              + ", ".join(f"a{w['alpha']:g} {w['recall']:.3f}/{w['trust_share']:.3f}" for w in row["weights"])
              + (" REACHABLE" if row["reachable"] else ""), flush=True)
        recorder.write(model=model, corpus=corpus, tokens=run.n_tokens, alphas=list(ALPHAS), hubs=HUBS,
                       heads_chosen_by=f"numpy.random.default_rng({args.seed}).choice, without replacement",
                       ceilings_from=str(ceilings_file) if ceilings else None, rows=rows, summary=summary(rows),
                       complete=len(rows) == len(drawn), recall_goal=RECALL_GOAL, ceiling_share=CEILING_SHARE,
                       goal_heads=list(GOAL_HEADS.get(model, (heads, heads))), earlier_runs=earlier)
    print(f"{model}: {summary(rows)}", flush=True)
    print(out, flush=True)


if __name__ == "__main__":
    main()
