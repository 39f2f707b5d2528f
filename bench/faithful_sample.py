"""Faithfulness on heads nobody chose, over text nobody tuned on: ``python -m bench.faithful_sample``.

The attention graph's defaults (k, alpha, temperature, key cap) were chosen by ``bench/faithful.py --sweep`` on
runs of the bundled corpus, ``data/sentences.txt``, and its table averages 8 heads chosen for it (sink heads and
the heads where t-SNE does worst). This bench instead takes a **held-out text**, *Paradise Lost* from
``data/classics.txt`` (its lines from "Of Man's first disobedience" on; no default was tuned on it), extracts
``--tokens`` tokens of it with each model, draws ``--heads`` heads per model with ``numpy.random.default_rng(--seed)``
(without replacement, over all layers and heads) and measures each ``--methods`` layout of each head as
``bench.faithful`` does: partner recall@10 (mean of query->key and key->query over 200 sampled points each),
trustworthiness (k = 10, on a fixed sample of ``--trust-sample`` points) and seconds per head.

Writes ``bench/results/faithful_sample.json`` (``--out``): per model, every head's row and each method's mean,
with the date, machine, load averages and arguments.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.faithful import REPO, compare, warm_up  # noqa: E402  (faithful.py puts the checkout on sys.path)
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, model_name, source  # noqa: E402
from qkviz.neighbours import RECALL_GOAL, TRUST_GOAL, meets_goals  # noqa: E402
from bench.harness import Recorder, smoke_arguments  # noqa: E402

import qkviz  # noqa: E402

HELD_OUT_START = "Of Man's first disobedience"


def held_out_sentences() -> list[str]:
    """*Paradise Lost*'s lines of ``data/classics.txt``."""
    lines = (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()
    start = next(number for number, line in enumerate(lines) if line.startswith(HELD_OUT_START))
    return lines[start:]


def random_heads(run, count: int, seed: int) -> list[tuple[int, int, str]]:
    """``count`` distinct (layer, head) pairs drawn with ``default_rng(seed)``, in the order drawn."""
    drawn = np.random.default_rng(seed).choice(run.n_layers * run.n_heads, size=count, replace=False)
    return [(int(index) // run.n_heads, int(index) % run.n_heads, "random") for index in drawn]


def means(rows: list[dict], methods: list[str]) -> dict:
    return {method: {"recall": round(float(np.mean([r["recall"] for r in rows if r["method"] == method])), 3),
                     "trust": round(float(np.mean([r["trust"] for r in rows if r["method"] == method])), 3),
                     "seconds": round(float(np.mean([r["seconds"] for r in rows if r["method"] == method])), 1),
                     "min_recall": round(float(min(r["recall"] for r in rows if r["method"] == method)), 3)}
            for method in methods}


def trusted_heads(models: dict, model: str, method: str) -> int | None:
    """How many of ``model``'s random heads ``method``'s layout keeps at trustworthiness :data:`TRUST_GOAL`."""
    rows = [row for row in models.get(model, {}).get("rows", []) if row["method"] == method]
    return sum(row["trust"] >= TRUST_GOAL for row in rows) if rows else None


def faithful_heads(models: dict, model: str, method: str) -> int | None:
    """How many of ``model``'s random heads ``method``'s layout lays out faithfully: partner recall@10 at least
    :data:`RECALL_GOAL` and trustworthiness at least :data:`TRUST_GOAL`, both (``qkviz.neighbours.meets_goals``)."""
    rows = [row for row in models.get(model, {}).get("rows", []) if row["method"] == method]
    return sum(meets_goals(row["recall"], row["trust"]) for row in rows) if rows else None


def trust_goal(model: str, label: str, heads: int) -> Goal:
    """Issue 39's goal: the default layout faithful on 14 of 16 random heads of ``model``: a head counts where the
    layout meets both the recall and the trustworthiness condition."""
    return Goal(f"{label} heads the default layout lays out faithfully", heads * 14 / 16, "heads", False,
                "faithful_sample", f"heads of {heads} with recall ≥ {RECALL_GOAL:.2f} and trustworthiness ≥ "
                f"{TRUST_GOAL:.2f}, both", lambda result: faithful_heads(result["models"], model, "attn-tsne"), digits=0)


@figure("trust-ceiling")
def trust_ceiling(results: Results) -> str:
    """Where t-SNE of the aligned points -- the space trustworthiness is measured in, laid out for its neighbours and
    nothing else -- keeps trustworthiness, beside the default layout, on the same random heads."""
    models = results("faithful_sample")["models"]
    bound = Goal("trustworthiness of a layout", TRUST_GOAL, "", False, "faithful_sample", "", lambda _: None, digits=2)
    lines = [f"| heads kept at trustworthiness {bound.stated()} | " + " | ".join(model_name(m) for m in models) + " |",
             "|---|" + "---|" * len(models)]
    recall = Goal("partner recall@10 of a layout", RECALL_GOAL, "", False, "faithful_sample", "", lambda _: None,
                  digits=1)
    rows = [("tsne", "t-SNE of the aligned points", trusted_heads), ("attn-tsne", "attn-tsne (default)", trusted_heads),
            ("tsne", f"t-SNE, recall {recall.stated()} as well", faithful_heads),
            ("attn-tsne", f"attn-tsne, recall {recall.stated()} as well", faithful_heads)]
    for method, label, count_of in rows:
        counts = [count_of(models, model, method) for model in models]
        lines.append(f"| {label} | " + " | ".join("not measured" if count is None else
                                                    f"{count} of {len(models[model]['heads'])}"
                                                    for model, count in zip(models, counts)) + " |")
    goals = "; ".join(f"{model_name(model)}: " + verdict(trust_goal(model, model_name(model), len(models[model]["heads"])), results)
                      for model in models)
    return ("\n".join(lines) + f"\n\nThe default layout faithful on 14 of 16 heads (a head counts where its layout "
            f"meets both conditions): {goals}. The heads of the README's table "
            f"(`bench/faithful_sample.py`, {source(results, 'faithful_sample')}).\n")


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,smollm2")
    parser.add_argument("--tokens", type=int, default=6000)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default="pca,tsne,umap,attn-tsne")
    parser.add_argument("--trust-sample", type=int, default=3000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/qkviz-faithful-sample"))
    parser.add_argument("--out", type=Path)
    args = smoke_arguments(parser, argv, out='out', models='minilm', tokens=300, heads=2, methods='pca,attn-tsne',
                           trust_sample=200, dir=Path(tempfile.mkdtemp(prefix='qkviz-smoke-')))
    recorder = Recorder("faithful_sample", vars(args), args.out)
    methods = [method.strip() for method in args.methods.split(",") if method.strip()]
    sentences = held_out_sentences()
    warm_up()
    models = {}
    for model in (name.strip() for name in args.models.split(",") if name.strip()):
        started = time.perf_counter()
        run = qkviz.extract(model, sentences, args.dir / model, max_tokens=args.tokens, progress=False)
        heads = random_heads(run, args.heads, args.seed)
        print(f"{model}: {run.n_tokens} tokens of the held-out text; heads "
              + ", ".join(f"L{layer} H{head}" for layer, head, _ in heads), flush=True)
        rows = compare(run, heads, methods, args.trust_sample)
        models[model] = {"model_id": run.manifest["model"]["id"], "tokens": run.n_tokens,
                         "heads": [[layer, head] for layer, head, _ in heads], "mean": means(rows, methods),
                         "rows": rows, "seconds": round(time.perf_counter() - started, 1)}
        print(f"{model}: {models[model]['mean']}", flush=True)
    print(recorder.write(corpus="data/classics.txt: Paradise Lost (held out: no default was tuned on it)",
                         heads_chosen_by=f"numpy.random.default_rng({args.seed}).choice, without replacement",
                         models=models))


if __name__ == "__main__":
    main()
