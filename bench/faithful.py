"""How faithful each 2D layout is to the attention: ``python -m bench.faithful --run RUN | --model NAME [--sweep]``.

``--model minilm`` (or ``smollm2``) makes the run itself: the model over the bundled corpus, ``data/sentences.txt``,
all of it (the corpus the attention graph's defaults were tuned on), in ``--dir``; the table's heads are then
**chosen** (see below), and the result file says so. For heads nobody chose, over a text nobody tuned on, see
``bench.faithful_sample``.

Measured per head, for every layout (``--methods``): pca, tsne, umap (qkviz's defaults), ``av-tsne``
(t-SNE as AttentionViz computes it: ``bench.project``'s recipe, scikit-learn TSNE, perplexity 50,
300 iterations, cosine), and the attention-faithful ``attn-tsne`` and ``attn-umap`` at their defaults:

* **partner recall@10**, as the app measures it (``qkviz.search.head_layout_overlap``): of a point's 10
  strongest partners over the whole corpus by ``scale * q . k``, the share among its 10 nearest points
  of the other kind in the layout, over a seeded sample of 200 queries (``q->k``) and 200 keys (``k->q``);
  ``recall`` is their mean, chance is 10 / n_tokens;
* **trustworthiness** (k = 10, ``sklearn.manifold.trustworthiness``, Euclidean, against the aligned
  points) on a seeded subsample of ``--trust-sample`` points (3,000 of 10,000 by default, the same points
  for every layout: the full matrix of distances would cost 0.8 GB and minutes per layout);
* **seconds** for the head's layout from the aligned points, everything the method needs included (its
  own neighbour graph, or the attention graph: the exact corpus-wide top-k both ways), one process, one
  thread pool as the machine gives it; the alignment (shared by all) and UMAP's numba compilation (done
  once before timing) are not counted;
* ``beyond-first``: the same recall with every sentence's first-token key left out of the partners and of
  the layout's neighbours (what the picture shows of a head's attention besides its sink);
* ``sink-near``: the share of a sample of 1,000 queries whose nearest key in the layout is a first-token key
  (how much of the picture gathers around the sink).

``attn-tsne-hide1`` / ``attn-umap-hide1`` are the attention methods with ``hide_first_token`` on (every
sentence's first-token key left out of the queries' candidate keys), ``attn-tsne-keep1`` / ``attn-umap-keep1``
with it off, whatever the defaults; in ``--sweep``, ``--settings hide_first_token=true`` does the same.
``--av-per-kind N`` runs the AttentionViz recipe (1-2 minutes a head) on only N heads of each kind.

Heads (``--heads``, else chosen from the run by ``bench.head_survey``): the ``--sinks`` heads with the largest share of attention on
the first token (recomputed over a seeded sample of sentences), the ``--hardest`` heads whose aligned space
keeps the fewest attention partners among its cosine neighbours (what t-SNE and UMAP preserve: the heads
with the lowest recall today), and ``--ordinary`` heads of median fidelity that are not sinks.

``--sweep`` instead varies the attention graph's parameters one at a time around the defaults (k, alpha,
temperature, key_cap) plus a k x alpha grid for the trade-off curve (``--settings`` names the settings
instead), on ``--heads`` (default: the two strongest sink heads and the two hardest heads), and prints
recall, trustworthiness and seconds per setting, averaged over the heads. ``--json PATH`` writes every measurement.

What the pages say from these result files (the figure blocks and their goals) is :mod:`bench.faithful_figures`.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402
from qkviz.core import LogitRule, align_head  # noqa: E402
from qkviz import projection  # noqa: E402  (its attention_graph: the function, not the module of that name)
from qkviz.projection import GRAPH_PARAMS  # noqa: E402
from qkviz.projection import project_points  # noqa: E402
from qkviz.search import PartnerIndexes, head_layout_overlap  # noqa: E402
from qkviz.projection import projection_methods, resolve_params  # noqa: E402

from bench.head_survey import K, SAMPLE, choose_heads, survey_heads  # noqa: E402
from bench.project import attentionviz_layout  # noqa: E402
from bench.harness import RESULTS, Recorder, smoke_arguments  # noqa: E402

#: Labels measured as an attention method with one parameter set: (method, params).
#: the methods whose neighbour graph is the head's attention
ATTENTION_METHODS = tuple(method.name for method in projection_methods() if method.uses_attention)
VARIANTS = {f"{method}-{label}": (method, {"hide_first_token": hide}) for method in ATTENTION_METHODS
            for label, hide in (("hide1", True), ("keep1", False))}
METHODS = ("pca", "tsne", "umap", "av-tsne", "attn-tsne", "attn-umap", *VARIANTS)
DEFAULT_METHODS = ("pca", "tsne", "umap", "av-tsne", "attn-tsne", "attn-umap", "attn-tsne-hide1", "attn-umap-hide1")


# -- one layout -------------------------------------------------------------------------------------
def layout(run, layer: int, head: int, points: np.ndarray, method: str, **params) -> tuple[np.ndarray, float, dict]:
    """``(coordinates, seconds, extra)`` of one 2D layout of the head's aligned ``points``."""
    started = time.perf_counter()
    extra: dict = {}
    if method == "av-tsne":
        coordinates = attentionviz_layout(points, "tsne", 2)
    elif method in ATTENTION_METHODS or method in VARIANTS:
        method, fixed = VARIANTS.get(method, (method, {}))
        params = resolve_params(method, {**params, **fixed}, 2)
        graph_params = {name: params.pop(name) for name in GRAPH_PARAMS}
        graph = projection.attention_graph(run.queries(layer, head), run.keys(layer, head), points,
                                           run.logit_rule(layer, head), first_tokens=first_tokens(run), **graph_params)
        extra["capped_keys"] = int(len(graph.sinks))
        coordinates = project_points(points, method, 2, attention=graph, **params).coordinates
    else:
        coordinates = project_points(points, method, 2, **params).coordinates
    return np.asarray(coordinates, dtype=np.float32), time.perf_counter() - started, extra


def first_tokens(run) -> np.ndarray:
    """Token indices of every sentence's first token (what ``hide_first_token`` leaves out)."""
    return np.flatnonzero(run.tokens["position"].to_numpy() == 0)


def recall_beyond_first(run, indexes, layer: int, head: int, coordinates: np.ndarray, seed: int = 0) -> float:
    """Partner recall@10 with every first-token key left out (of the partners and of the layout's
    neighbours): what the picture shows of the attention besides the sink; mean of both sides."""
    n = run.n_tokens
    first = run.tokens["position"].to_numpy() == 0
    rng = np.random.default_rng(seed)
    shares = []
    for side in ("query", "key"):
        pool = np.arange(n) if side == "query" else np.flatnonzero(~first)
        for token in rng.choice(pool, min(SAMPLE, len(pool)), replace=False):
            point = int(token) + (0 if side == "query" else n)
            partners = indexes.partners(layer, head, point, K, exclude=first if side == "query" else None)
            if side == "query":
                candidates = n + np.flatnonzero(~first)
            else:
                candidates = np.arange(n)
            distances = np.sum((coordinates[candidates] - coordinates[point]) ** 2, axis=1)
            near = candidates[np.argpartition(distances, K - 1)[:K]]
            shares.append(len(np.intersect1d(near, partners.points)) / K)
    return float(np.mean(shares))


def sink_near(run, coordinates: np.ndarray, seed: int = 0) -> float:
    """Share of a seeded sample of queries whose nearest key in the layout is a sentence's first token."""
    n = run.n_tokens
    first = (run.tokens["position"].to_numpy() == 0)
    chosen = np.random.default_rng(seed).choice(n, min(1000, n), replace=False)
    keys = coordinates[n:]
    nearest = [int(np.argmin(np.sum((keys - coordinates[t]) ** 2, axis=1))) for t in chosen]
    return float(first[nearest].mean())


SAVE: Path | None = None


def measure(run, indexes, layer: int, head: int, points: np.ndarray, trust_sample: np.ndarray, method: str,
            **params) -> dict:
    from sklearn.manifold import trustworthiness

    coordinates, seconds, extra = layout(run, layer, head, points, method, **params)
    if SAVE is not None:
        label = "_".join(f"{name}={value}" for name, value in sorted(params.items())) or "defaults"
        np.save(SAVE / f"l{layer}h{head}_{method}_{label}.npy", coordinates)
    overlap = head_layout_overlap(indexes, layer, head, coordinates, k=K, sample=SAMPLE)
    return {"layer": layer, "head": head, "method": method, "params": params, "seconds": seconds,
            "recall_q": overlap["query"], "recall_k": overlap["key"],
            "recall": (overlap["query"] + overlap["key"]) / 2, "chance": overlap["chance"],
            "trust": float(trustworthiness(points[trust_sample], coordinates[trust_sample], n_neighbors=K)),
            "sink_near": sink_near(run, coordinates),
            "recall_beyond_first": recall_beyond_first(run, indexes, layer, head, coordinates), **extra}


def warm_up() -> None:
    """Compile UMAP's numba code (both UMAP paths) before anything is timed."""
    rng = np.random.default_rng(0)
    warm = rng.normal(size=(600, 8)).astype(np.float32)
    project_points(warm, "umap", 2)
    graph = projection.attention_graph(warm[:300], warm[300:], warm, LogitRule(1.0), k=5, same_kind_k=5)
    project_points(warm, "attn-umap", 2, attention=graph)


# -- the comparison table ---------------------------------------------------------------------------
def compare(run, heads, methods, trust_points: int, av_per_kind: int | None = None) -> list[dict]:
    indexes = PartnerIndexes(run)
    rows = []
    av_done: dict[str, int] = {}
    for layer, head, kind in heads:
        points = align_head(run.queries(layer, head), run.keys(layer, head)).points.astype(np.float32)
        trust_sample = np.random.default_rng(0).choice(len(points), min(trust_points, len(points)), replace=False)
        for method in methods:
            if method == "av-tsne" and av_per_kind is not None:
                if av_done.get(kind, 0) >= av_per_kind:
                    continue
                av_done[kind] = av_done.get(kind, 0) + 1
            row = measure(run, indexes, layer, head, points, trust_sample, method)
            row["kind"] = kind
            rows.append(row)
            print(f"  L{layer} H{head} ({kind}) {method:15s} recall q->k {row['recall_q']:.3f} k->q {row['recall_k']:.3f}"
                  f"  trust {row['trust']:.3f}  {row['seconds']:6.1f} s  beyond-first {row['recall_beyond_first']:.3f}"
                  f"  sink-near {row['sink_near']:.2f}", flush=True)
    return rows


def print_table(rows: list[dict], methods, title: str) -> None:
    heads = list(dict.fromkeys((row["layer"], row["head"], row["kind"]) for row in rows))
    by = {(row["layer"], row["head"], row["method"]): row for row in rows}
    print(f"\n{title}: partner recall@10 (mean of q->k and k->q) / trustworthiness / seconds per head")
    print("| head | " + " | ".join(methods) + " |")
    print("|---|" + "---|" * len(methods))
    for layer, head, kind in heads:
        cells = [f"{by[layer, head, m]['recall']:.3f} / {by[layer, head, m]['trust']:.3f} / {by[layer, head, m]['seconds']:.1f}"
                 if (layer, head, m) in by else "-" for m in methods]
        print(f"| L{layer} H{head} ({kind}) | " + " | ".join(cells) + " |")
    means = []
    for m in methods:
        chosen = [row for row in rows if row["method"] == m]
        means.append(f"**{np.mean([r['recall'] for r in chosen]):.3f} / {np.mean([r['trust'] for r in chosen]):.3f} / "
                     f"{np.mean([r['seconds'] for r in chosen]):.1f}**" + ("" if len(chosen) == len(heads) else f" ({len(chosen)} heads)"))
    print("| mean | " + " | ".join(means) + " |")
    print("\nmean per method: recall q->k, k->q; min recall over heads; min trustworthiness; recall beyond the "
          "first token; sink-near on sink heads")
    for m in methods:
        chosen = [row for row in rows if row["method"] == m]
        sinks = [row["sink_near"] for row in chosen if row["kind"] == "sink"]
        print(f"  {m:15s} q->k {np.mean([r['recall_q'] for r in chosen]):.3f}  k->q {np.mean([r['recall_k'] for r in chosen]):.3f}"
              f"  min recall {min(r['recall'] for r in chosen):.3f}  min trust {min(r['trust'] for r in chosen):.3f}"
              f"  beyond-first {np.mean([r['recall_beyond_first'] for r in chosen]):.3f}"
              f"  sink-near {np.mean(sinks) if sinks else float('nan'):.2f}")


def goals(rows: list[dict], method: str) -> None:
    """The issue's goals for ``method``, head by head, against today's t-SNE."""
    by = {(row["layer"], row["head"], row["method"]): row for row in rows}
    heads = list(dict.fromkeys((row["layer"], row["head"]) for row in rows))
    if not all((l, h, method) in by and (l, h, "tsne") in by for l, h in heads):
        return
    ours = [by[l, h, method] for l, h in heads]
    today = [by[l, h, "tsne"] for l, h in heads]
    print(f"\ngoals for {method} (every measured head):")
    recall_ok = sum(o["recall"] >= 0.30 for o in ours)
    ratio = [o["recall"] / max(t["recall"], 1e-9) for o, t in zip(ours, today)]
    print(f"  recall >= 0.30: {recall_ok}/{len(ours)} heads (min {min(o['recall'] for o in ours):.3f}, "
          f"mean {np.mean([o['recall'] for o in ours]):.3f})")
    print(f"  recall >= 3x tsne: {sum(r >= 3 for r in ratio)}/{len(ours)} heads (min ratio {min(ratio):.1f}x, "
          f"median {np.median(ratio):.1f}x)")
    print(f"  trustworthiness >= 0.90: {sum(o['trust'] >= 0.9 for o in ours)}/{len(ours)} heads "
          f"(min {min(o['trust'] for o in ours):.3f}, mean {np.mean([o['trust'] for o in ours]):.3f})")
    print(f"  faithful, recall >= 0.30 and trustworthiness >= 0.90 both: "
          f"{sum(o['recall'] >= 0.30 and o['trust'] >= 0.9 for o in ours)}/{len(ours)} heads")
    faster = [o["seconds"] <= t["seconds"] for o, t in zip(ours, today)]
    print(f"  seconds <= tsne: {sum(faster)}/{len(ours)} heads (mean {np.mean([o['seconds'] for o in ours]):.1f} s "
          f"vs {np.mean([t['seconds'] for t in today]):.1f} s)")


# -- the parameter sweep ----------------------------------------------------------------------------
def sweep_settings(grid: bool) -> list[dict]:
    """One factor at a time around the defaults, then (``grid``) the k x alpha grid at the other defaults.
    (The defaults were chosen from this sweep run around the earlier ones, key_cap 5: see the README.)"""
    settings = [{}]
    for name, values in (("k", (5, 20)), ("alpha", (0.0, 0.25, 1.0)), ("temperature", (3.0, 10.0)),
                         ("key_cap", (2.0, 5.0, 50.0))):
        settings += [{name: value} for value in values]
    if grid:
        settings += [{"k": k, "alpha": alpha} for k in (5, 20) for alpha in (0.0, 1.0)]
    return settings


def parse_setting(text: str) -> dict:
    """``"key_cap=inf,alpha=0.25"`` -> ``{"key_cap": inf, "alpha": 0.25}``; ``"defaults"`` -> ``{}``."""
    setting: dict = {}
    for part in text.split(","):
        if part.strip() and part.strip() != "defaults":
            name, value = (item.strip() for item in part.split("="))
            if value.lower() in ("true", "false"):
                setting[name] = value.lower() == "true"
            elif name in INTEGER_PARAMS:
                setting[name] = int(value)
            elif name in TEXT_PARAMS:
                setting[name] = value
            else:
                setting[name] = float(value)
    return setting


#: Parameters the sweep reads as integers (the rest: floats, or true / false).
INTEGER_PARAMS = ("k", "same_kind_k", "n_neighbors", "n_epochs", "n_iter", "early_exaggeration_iter", "negative_sample_rate")
TEXT_PARAMS = ("init", "metric")


def sweep(run, heads, methods, trust_points: int, grid: bool, settings: list[dict] | None = None) -> list[dict]:
    indexes = PartnerIndexes(run)
    rows = []
    prepared = []
    for layer, head, kind in heads:
        points = align_head(run.queries(layer, head), run.keys(layer, head)).points.astype(np.float32)
        trust_sample = np.random.default_rng(0).choice(len(points), min(trust_points, len(points)), replace=False)
        prepared.append((layer, head, kind, points, trust_sample))
    for method in methods:
        for setting in settings if settings is not None else sweep_settings(grid and method == "attn-tsne"):
            found = []
            for layer, head, kind, points, trust_sample in prepared:
                row = measure(run, indexes, layer, head, points, trust_sample, method, **setting)
                row["kind"] = kind
                found.append(row)
            rows += found
            label = ", ".join(f"{name}={value}" for name, value in setting.items()) or "defaults"
            sinks = [r for r in found if r["kind"] == "sink"]
            print(f"  {method:9s} {label:24s} recall {np.mean([r['recall'] for r in found]):.3f} "
                  f"(q->k {np.mean([r['recall_q'] for r in found]):.3f}, k->q {np.mean([r['recall_k'] for r in found]):.3f}, "
                  f"min {min(r['recall'] for r in found):.3f})  trust {np.mean([r['trust'] for r in found]):.3f} "
                  f"(min {min(r['trust'] for r in found):.3f})  {np.mean([r['seconds'] for r in found]):5.1f} s"
                  + f"  beyond-first {np.mean([r['recall_beyond_first'] for r in found]):.3f}"
                  + (f"  sink-near {np.mean([r['sink_near'] for r in sinks]):.2f}" if sinks else ""), flush=True)
    return rows


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="a run directory (qkviz extract --out ...)")
    source.add_argument("--model", help="a bundled model: extract it over data/sentences.txt into --dir first")
    parser.add_argument("--dir", type=Path, default=Path("/tmp/qkviz-faithful"), help="where --model's run goes")
    parser.add_argument("--heads", nargs="*", help="layer,head pairs, each optionally with :kind (e.g. 4,5:sink); "
                        "default: chosen from the run, see above")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma-separated, from {', '.join(METHODS)}")
    parser.add_argument("--sinks", type=int, default=3)
    parser.add_argument("--hardest", type=int, default=3)
    parser.add_argument("--ordinary", type=int, default=2)
    parser.add_argument("--trust-sample", type=int, default=3000, help="points for trustworthiness (same for all)")
    parser.add_argument("--av-per-kind", type=int, help="run the AttentionViz recipe (1.5-2 min a head) on only this "
                        "many heads of each kind (sink, hard, ordinary)")
    parser.add_argument("--sweep", action="store_true", help="sweep the attention graph's parameters instead")
    parser.add_argument("--settings", nargs="*", help="sweep only these settings, e.g. key_cap=inf,alpha=0.25 defaults")
    parser.add_argument("--no-grid", action="store_true", help="sweep: leave out the k x alpha grid")
    parser.add_argument("--json", type=Path, help="write every measurement here (default with --model: "
                        "bench/results/faithful_chosen_<model>.json; --sweep: faithful_sweep_<model>.json)")
    parser.add_argument("--save-layouts", type=Path, help="save every layout here as .npy")
    args = smoke_arguments(parser, argv, out='json', heads=['0,0', '1,1'], methods='pca,attn-tsne', trust_sample=200, av_per_kind=0)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods {', '.join(sorted(unknown))}")
    started = time.perf_counter()
    if args.save_layouts:
        global SAVE
        SAVE = args.save_layouts
        SAVE.mkdir(parents=True, exist_ok=True)
    if args.model:
        run = qkviz.extract(args.model, REPO / "data" / "sentences.txt", args.dir / args.model, progress=False)
        args.json = args.json or RESULTS / f"faithful_{'sweep' if args.sweep else 'chosen'}_{args.model}.json"
    else:
        run = qkviz.open_run(args.run)
    recorder = Recorder("faithful", vars(args), args.json) if args.json else None
    print(f"{run.manifest['model']['id']}: {run.n_tokens} tokens, {run.n_layers} x {run.n_heads} heads", flush=True)
    survey = None
    if args.heads:
        heads = [(int(pair.split(":")[0].split(",")[0]), int(pair.split(":")[0].split(",")[1]),
                  pair.split(":")[1] if ":" in pair else "given") for pair in args.heads]
    else:
        survey_started = time.perf_counter()
        survey = survey_heads(run)
        sink_heads = sum(row["first_token"] >= 0.5 for row in survey)
        print(f"survey of {len(survey)} heads in {time.perf_counter() - survey_started:.1f} s: {sink_heads} put half "
              f"their attention or more on the first token; cosine fidelity median "
              f"{np.median([r['cosine_fidelity'] for r in survey]):.3f}, min {min(r['cosine_fidelity'] for r in survey):.3f}")
        if args.sweep:
            heads = choose_heads(survey, 2, 2, 0)
        else:
            heads = choose_heads(survey, args.sinks, args.hardest, args.ordinary)
        by = {(r["layer"], r["head"]): r for r in survey}
        for layer, head, kind in heads:
            print(f"  L{layer} H{head}: {kind}, first-token share {by[layer, head]['first_token']:.2f}, "
                  f"cosine fidelity {by[layer, head]['cosine_fidelity']:.3f}")
    warm_up()
    if args.sweep:
        settings = [parse_setting(text) for text in args.settings] if args.settings else None
        swept = [m for m in methods if m in ATTENTION_METHODS or m in VARIANTS or (settings and m in ("tsne", "umap"))]
        rows = sweep(run, heads, swept, args.trust_sample, not args.no_grid, settings)
    else:
        rows = compare(run, heads, methods, args.trust_sample, args.av_per_kind)
        print_table(rows, methods, f"{run.manifest['model']['id']}, {run.n_tokens} tokens")
        for method in ATTENTION_METHODS:
            if method in methods:
                goals(rows, method)
    total = time.perf_counter() - started
    print(f"\nbench wall time {total / 60:.1f} min", flush=True)
    if recorder is not None:
        print(recorder.write(run=str(run.path), model=run.manifest["model"]["id"], n_tokens=run.n_tokens,
                             corpus="data/sentences.txt (the corpus the defaults were tuned on)" if args.model
                             else f"the run's ({args.run})",
                             heads_chosen_by="given (--heads)" if args.heads else "chosen: bench/head_survey.py's sinks, "
                             "hardest and ordinary heads (not a random sample)", survey=survey, rows=rows,
                             means={method: {"recall": float(np.mean([r["recall"] for r in rows if r["method"] == method])),
                                             "trust": float(np.mean([r["trust"] for r in rows if r["method"] == method])),
                                             "seconds": float(np.mean([r["seconds"] for r in rows if r["method"] == method]))}
                                    for method in dict.fromkeys(r["method"] for r in rows)},
                             seconds=total))


if __name__ == "__main__":
    main()
