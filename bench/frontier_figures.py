"""The figure block drawn from ``bench.faithful_frontier``'s result files (``bench/results/faithful_frontier_*.json``):
whether any same-kind weight lets ``attn-tsne`` meet issue 53's goal on each held-out head (``python -m
bench.figures``; the goal judged by ``bench.figures.goals.verdict``)."""

from __future__ import annotations

from qkviz.neighbours import RECALL_GOAL

from bench.faithful_figures import CEILING_SHARE, ceiling_share_stated
from bench.figures.goals import Goal, verdict
from bench.figures.results import BUNDLED, Results, figure, model_name, source


def frontier_goal(model: str, result: dict, name: str, seed: int) -> Goal:
    """Issue 53's head count, read as the most any choice of weight could give: heads where some weight meets both."""
    needed, of = result["goal_heads"]
    return Goal(f"{model_name(model)} heads that some weight makes faithful", needed, "heads", False, name,
                f"of {len(result['rows'])} heads drawn with seed {seed} (the goal names {of}), with some weight at "
                f"recall ≥ "
                f"{RECALL_GOAL:.2f} and ≥ {CEILING_SHARE:.2f} of t-SNE's trustworthiness, both",
                lambda found: found["summary"]["reachable"], digits=0)


def best(row: dict, share: float | None) -> str:
    """``0.379 (α 0.125)``: the highest recall of the head's weights (those keeping ``share`` of the ceiling)."""
    kept = [weight for weight in row["weights"] if share is None or weight["trust_share"] >= share]
    if not kept:
        return "none"
    top = max(kept, key=lambda weight: weight["recall"])
    return f"{top['recall']:.3f} (α {top['alpha']:g})"


#: the further draws (seeds of bench.faithful_ceiling's other draws), each judged on a line of its own
OTHER_SEEDS = (1, 2)


def draw_line(model: str, name: str, result: dict, results: Results) -> str:
    """One draw's verdict and how many of its heads reach the recall at any weight."""
    summary = result["summary"]
    incomplete = "" if result["complete"] else " (**incomplete**: the run stopped before its last head)"
    ceiling = name.replace("faithful_frontier_", "faithful_ceiling_")
    default = (f"; the default layout of `bench/faithful_ceiling.py`: {results(ceiling)['summary']['default']['meets']}"
               " heads" if results.exists(ceiling) else "")
    seed = results.record(name)["arguments"]["seed"]
    return (f"{model_name(model)}, seed {seed}{incomplete}: "
            f"{verdict(frontier_goal(model, result, name, seed), results)}; {summary['recall_reachable']} of "
            f"{summary['heads']} reach recall {RECALL_GOAL:.2f} at some weight{default}")


@figure("faithful-frontier")
def faithful_frontier(results: Results) -> str:
    names = {model: f"faithful_frontier_{model}" for model in BUNDLED if results.exists(f"faithful_frontier_{model}")}
    if not names:
        return "Not measured yet: `python -m bench.faithful_frontier --model minilm`.\n"
    share = ceiling_share_stated()
    lines = ["| head | partner slots held by the 50 most-listed keys | highest recall, any weight "
             f"| highest recall keeping {share} of the ceiling |", "|---|---|---|---|"]
    for model, name in names.items():
        for row in results(name)["rows"]:
            mark = " ✓" if row["reachable"] else ""
            lines.append(f"| {model_name(model)} L{row['layer']} H{row['head']} | "
                         f"{row['hubs']['query']['hub_share']:.2f} | {best(row, None)} | "
                         f"{best(row, CEILING_SHARE)}{mark} |")
    drawn = [(model, name) for model, first in names.items()
             for name in (first, *(f"{first}_seed{seed}" for seed in OTHER_SEEDS)) if results.exists(name)]
    verdicts = [draw_line(model, name, results(name), results) for model, name in drawn]
    alphas = ", ".join(f"{alpha:g}" for alpha in results(drawn[0][1])["alphas"])
    return ("\n".join(lines) + "\n\n✓: some weight meets both conditions on the head (seed 0's heads, as in the "
            "first table above). Every draw:\n\n" + "\n".join(f"- {line}." for line in verdicts)
            + f"\n\nWeights tried: {alphas}, each a fit of its own at that weight. The best of them is judged on the "
            "bench's own sample, a choice made with the answer in hand: about the most that one fixed weight per head "
            "gives, not a layout a user gets. It is not a strict bound on the trade, whose path (a fit at its starting "
            "weight, then 40 iterations at each step from there) differs from every fixed-weight fit, and can meet the "
            "goal on a head that none of them meets. `bench/faithful_frontier.py` on "
            f"the held-out runs and heads of `bench/faithful_ceiling.py`, ceilings read from its results "
            f"({source(results, *(name for _, name in drawn))}).\n")
