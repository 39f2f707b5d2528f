"""Figure blocks rendered from ``bench/results/*.json``; registered with :func:`bench.figures.results.figure` when imported.

docs/methods.md's: what each layout keeps (``faithful_chosen_minilm``, ``umap_sweep_minilm``), UMAP's former
and current defaults (``umap_sweep_minilm``), attn-tsne's k x alpha trade-off (``faithful_sweep_minilm``) and
the thousand heads (``thousand_heads``)."""

from __future__ import annotations

from statistics import mean

from bench.figures.results import Results, figure, minutes, model_name, source
from bench.figures.scale import LAYOUTS_1024
from bench.figures.goals import Goal, verdict

#: the layouts' goals on every measured head (issue 22): trustworthiness and partner recall@10
TRUST_GOAL = 0.90
RECALL_GOAL = 0.30


def lowest(rows: list[dict], key: str) -> float | None:
    return min(row[key] for row in rows) if rows else None


def default_cell(result: dict) -> list[dict]:
    """The k × α sweep's rows of attn-tsne at its default k and α."""
    current = defaults("attn-tsne")
    return [row for row in result["rows"] if row["method"] == "attn-tsne"
            and all(row["params"].get(name, current[name]) == current[name] for name in ("k", "alpha"))]


UMAP_TRUST = Goal("UMAP's trustworthiness on every measured head", TRUST_GOAL, "", False, "umap_sweep_minilm",
                  "lowest head at today's defaults", lambda found: lowest(setting_rows(found, "umap"), "trust"), 3)
ATTN_RECALL = Goal("attn-tsne's partner recall@10 on every measured head", RECALL_GOAL, "", False,
                   "faithful_sweep_minilm", "lowest head at the default k and α",
                   lambda found: lowest(default_cell(found), "recall"), 3)
ATTN_TRUST = Goal("attn-tsne's trustworthiness on every measured head", TRUST_GOAL, "", False, "faithful_sweep_minilm",
                  "lowest head at the default k and α", lambda found: lowest(default_cell(found), "trust"), 3)
#: the default layouts of a 1,024-head model against full fits (issue 28)
RECALL_RATIO_MEAN = Goal("the default layouts' partner recall against a full fit's", 0.9, "×", False, "thousand_heads",
                         "mean over the sampled heads", lambda found: found["quality"]["summary"]["recall_ratio"], 2)
RECALL_RATIO_EVERY_HEAD = Goal("the default layouts' partner recall against a full fit's, on every head", 0.9, "×",
                               False, "thousand_heads", "lowest head",
                               lambda found: found["quality"]["summary"]["recall_ratio_min_head"], 2)


def head_label(row: dict) -> str:
    return f"L{row['layer']} H{row['head']}"


def tokens(result: dict) -> str:
    return f"{result['n_tokens']:,} tokens" if result.get("n_tokens") else "tokens not recorded"


def defaults(method: str) -> dict:
    """qkviz's current defaults for a 2D layout (read from the code, not measured)."""
    from qkviz.projection import resolve_params

    return resolve_params(method, {}, 2)


def setting_rows(result: dict, method: str, **params) -> list[dict]:
    """The sweep's rows of ``method`` whose swept parameters are ``params`` (an unswept one at its default)."""
    current = defaults(method)
    return [row for row in result["rows"] if row["method"] == method
            and all(row["params"].get(name, current.get(name)) == value for name, value in params.items())
            and all(params.get(name, current.get(name)) == value for name, value in row["params"].items())]


# -- Projections: what each layout keeps ------------------------------------------------------------
@figure("layouts-keep")
def layouts_keep(results: Results) -> str:
    lines, names = [], []
    labels = {"pca": "PCA", "tsne": "t-SNE", "umap": "UMAP", "attn-tsne": "attn-tsne", "attn-umap": "attn-umap"}
    if results.exists("faithful_chosen_minilm"):
        chosen = results("faithful_chosen_minilm")
        names.append("faithful_chosen_minilm")
        for method, label in labels.items():
            rows = [row for row in chosen["rows"] if row["method"] == method]
            if rows:
                lines.append((label, rows, f"{len(rows)} chosen heads, {tokens(chosen)}", chosen))
    if results.exists("faithful_hide_minilm"):
        hide = results("faithful_hide_minilm")
        rows = [row for row in hide["rows"] if row["method"] == "attn-umap"]
        if rows and "attn-umap" not in {line[0] for line in lines}:
            names.append("faithful_hide_minilm")
            lines.append(("attn-umap", rows, f"{len(rows)} chosen heads, {tokens(hide)}", hide))
    if results.exists("umap_sweep_minilm"):
        swept = results("umap_sweep_minilm")
        rows = setting_rows(swept, "umap")
        if rows:
            names.append("umap_sweep_minilm")
            lines.append(("UMAP", rows, f"{len(rows)} of those heads, {tokens(swept)}", swept))
    table = ["| MiniLM, 2D | heads | query→key recall@10 | chance | trustworthiness | s / head |",
             "|---|---|---|---|---|---|"]
    for label, rows, heads, result in lines:
        chance = mean(row["chance"] for row in rows) if all("chance" in row for row in rows) else None
        table.append(f"| {label} | {heads} | {mean(r['recall_q'] for r in rows):.1%} | "
                     + (f"{chance:.1%}" if chance is not None else "") + f" | {mean(r['trust'] for r in rows):.3f} | "
                     f"{mean(r['seconds'] for r in rows):.1f} |")
    absent = [label for method, label in labels.items() if label not in {line[0] for line in lines}]
    return ("\n".join(table) + "\n\n"
            + (f"Not measured in these files for this table: {', '.join(absent)}. " if absent else "")
            + "Seconds: one layout in one process on the shared 2-core machine, compare within a file only. "
            + f"`bench/faithful.py` ({source(results, *names)}).\n")


# -- UMAP's defaults --------------------------------------------------------------------------------
@figure("umap-defaults")
def umap_defaults(results: Results) -> str:
    result = results("umap_sweep_minilm")
    current = defaults("umap")
    settings = [("former defaults (spectral start, rate 5)", setting_rows(result, "umap", init="spectral",
                                                                           negative_sample_rate=5)),
                (f"**defaults now** ({current['init']} start, rate {current['negative_sample_rate']})",
                 setting_rows(result, "umap"))]
    settings = [(label, rows) for label, rows in settings if rows]
    names = ["umap_sweep_minilm"]
    if results.exists("umap_sweep_tsne_minilm"):
        names.append("umap_sweep_tsne_minilm")
        settings.append(("t-SNE, for comparison (its defaults)",
                         [row for row in results("umap_sweep_tsne_minilm")["rows"] if row["method"] == "tsne"]))
    heads = list(dict.fromkeys(head_label(row) for _, rows in settings for row in rows))
    table = ["| MiniLM UMAP 2D, trustworthiness | " + " | ".join(heads)
             + f" | mean | heads {UMAP_TRUST.stated()} | recall@10 | s / head |",
             "|---" * (len(heads) + 5) + "|"]
    for label, rows in settings:
        by = {head_label(row): row for row in rows}
        table.append(f"| {label} | " + " | ".join(f"{by[h]['trust']:.3f}" if h in by else "" for h in heads)
                     + f" | {mean(r['trust'] for r in rows):.3f} | {sum(UMAP_TRUST.met(r['trust']) for r in rows)}/{len(rows)}"
                     f" | {mean(r['recall'] for r in rows):.3f} | {mean(r['seconds'] for r in rows):.1f} |")
    verdict_text = ""
    if len(settings) >= 2:
        (_, before), (_, now) = settings[:2]
        change = mean(r["trust"] for r in now) - mean(r["trust"] for r in before)
        ratio = mean(r["seconds"] for r in now) / mean(r["seconds"] for r in before)
        verdict_text = (f"The defaults now {'raise' if change > 0 else 'lower'} mean trustworthiness by "
                        f"{abs(change):.3f} at {ratio:.1f}× the layout time; the goal on every head: "
                        f"{verdict(UMAP_TRUST, results)}"
                        + ("; short of it: " + ", ".join(head_label(r) for r in now if not UMAP_TRUST.met(r["trust"]))
                           if any(not UMAP_TRUST.met(r["trust"]) for r in now) else "") + ". ")
    return ("\n".join(table) + "\n\n" + verdict_text
            + f"{tokens(result)}, trustworthiness k = 10 on {result['arguments']['trust_sample']:,} of the points; "
            f"`bench/faithful.py --run RUN --sweep --methods umap --settings init=spectral,negative_sample_rate=5 "
            f"defaults`" + (" and, for t-SNE, `--methods tsne`" if len(names) > 1 else "")
            + f" ({source(results, *names)}).\n")


# -- Attention-faithful layouts: the k x alpha trade-off --------------------------------------------
@figure("attn-tradeoff")
def attn_tradeoff(results: Results) -> str:
    result = results("faithful_sweep_minilm")
    current = defaults("attn-tsne")
    rows = [row for row in result["rows"] if row["method"] == "attn-tsne"]
    value = lambda row, name: row["params"].get(name, current[name])  # noqa: E731
    ks = sorted({value(row, "k") for row in rows})
    alphas = sorted({value(row, "alpha") for row in rows})
    cell = {(k, a): [r for r in rows if value(r, "k") == k and value(r, "alpha") == a] for k in ks for a in alphas}
    table = ["| α \\ k | " + " | ".join(str(k) for k in ks) + " |", "|---" * (len(ks) + 1) + "|"]
    for alpha in alphas:
        cells = []
        for k in ks:
            found = cell[k, alpha]
            text = (f"{mean(r['recall'] for r in found):.3f} / {mean(r['trust'] for r in found):.3f}" if found else "")
            bold = (k, alpha) == (current["k"], current["alpha"]) and found
            cells.append(f"**{text}**" if bold else text)
        label = f"{alpha:g}"
        table.append(f"| {'**' + label + '**' if alpha == current['alpha'] else label} | " + " | ".join(cells) + " |")
    heads = list(dict.fromkeys(f"{head_label(r)} ({r.get('kind', 'given')})" for r in rows))
    # the largest alpha at which every k up to the default keeps mean recall at the goal
    keeping = [a for a in alphas if all(cell[k, a] and ATTN_RECALL.met(mean(r["recall"] for r in cell[k, a]))
                                        for k in ks if k <= current["k"])]
    best = max(keeping) if keeping else None
    recall, trust = ATTN_RECALL.stated(), ATTN_TRUST.stated()
    if best is None:
        said = f"No α keeps mean recall {recall} at every k up to {current['k']} on these heads. "
    else:
        said = (f"The largest α at which every k up to {current['k']} keeps mean recall {recall}: {best:g} "
                + ("(the default). " if best == current["alpha"] else f"(the default is {current['alpha']:g}). "))
    reach = [(k, a) for (k, a), found in cell.items() if found and ATTN_TRUST.met(mean(r["trust"] for r in found))
             and ATTN_RECALL.met(mean(r["recall"] for r in found))]
    said += (f"No cell's mean reaches trustworthiness {trust} with recall {recall}. " if not reach else
             f"Cells whose mean reaches trustworthiness {trust} and recall {recall}: "
             + ", ".join(f"k {k}, α {a:g}" for k, a in reach) + ". ")
    said += (f"The goals on every head, at the default k and α: recall {verdict(ATTN_RECALL, results)}; "
             f"trustworthiness {verdict(ATTN_TRUST, results)}. ")
    return ("\n".join(table) + "\n\n" + said
            + f"Recall@10 / trustworthiness, attn-tsne at its other defaults, mean over {len(heads)} MiniLM heads "
            f"({', '.join(heads)}), {tokens(result)}; `bench/faithful.py --run RUN --sweep --methods attn-tsne --heads ... "
            f"--settings k=5,alpha=0 ...` ({source(results, 'faithful_sweep_minilm')}).\n")


# -- A thousand heads -------------------------------------------------------------------------------
@figure("thousand-heads-quality")
def thousand_heads_quality(results: Results) -> str:
    result = results("thousand_heads")
    summary, run = result["quality"]["summary"], result["run"]
    full = result["full_fit"]
    return (f"| {summary['heads']} random heads, {run['tokens']:,} tokens | recall@10 | trustworthiness | "
            "CPU s / head |\n|---|---|---|---|\n"
            f"| full fit (`--sample 0`, exact graph, {full['early_exaggeration_iter']} + {full['n_iter']} iterations, "
            f"openTSNE's grid) | {summary['mean_full_recall']:.4f} | {summary['mean_full_trust']:.3f} | "
            f"{summary['mean_full_cpu_s']:.1f} |\n"
            f"| **default now** | **{summary['mean_default_recall']:.4f}** ({summary['recall_ratio']:.3f}×; lowest "
            f"head {summary['recall_ratio_min_head']:.2f}×) | {summary['mean_default_trust']:.3f} | "
            f"**{summary['mean_default_cpu_s']:.1f}** |\n\n"
            f"Recall goal, on the mean: {verdict(RECALL_RATIO_MEAN, results)}; on every head: "
            f"{verdict(RECALL_RATIO_EVERY_HEAD, results)}. "
            f"Trustworthiness {summary['mean_full_trust'] - summary['mean_default_trust']:.3f} lower than the full "
            f"fit's. `bench/thousand_heads.py --sample {result['arguments']['sample']} --seed "
            f"{result['arguments']['seed']}` ({source(results, 'thousand_heads')}).\n")


@figure("thousand-heads-time")
def thousand_heads_time(results: Results) -> str:
    result = results("thousand_heads")
    timing = result["timing"]
    load = timing.get("load_during") or []
    text = (f"`qkviz {timing['command'].split(' --run')[0]} --jobs {result['arguments']['jobs']}` on all "
            f"{timing['all_heads']:,} heads (PCA 2D and 3D and attn-tsne 2D): {minutes(timing['wall_s_all'])} wall "
            f"on the shared machine (load {min(load):.1f}–{max(load):.1f} during it; "
            f"{timing['load_before'][0]:.1f} when it began), {minutes(timing['cpu_s'])} of CPU, "
            f"{timing['cpu_s_per_head']:.2f} CPU s a head. Goal {verdict(LAYOUTS_1024, results)}. ")
    return text + f"`bench/thousand_heads.py` ({source(results, 'thousand_heads')}).\n"


# -- Attention-faithful layouts: how many heads are sink heads --------------------------------------
@figure("sink-survey")
def sink_survey(results: Results) -> str:
    names = [f"faithful_chosen_{model}" for model in ("minilm", "smollm2")
             if results.exists(f"faithful_chosen_{model}") and results(f"faithful_chosen_{model}").get("survey")]
    parts = []
    for name in names:
        result = results(name)
        survey = result["survey"]
        sinks = sum(row["first_token"] >= 0.5 for row in survey)
        model = model_name(result["model"]) if result.get("model") else name
        parts.append(f"{model}: {sinks} of {len(survey)} heads give the first token half their attention or more "
                     f"({tokens(result)})")
    return "; ".join(parts) + f". `bench/faithful.py --model` ({source(results, *names)}).\n"


# -- Large heads: what fitting on a sample costs ----------------------------------------------------
@figure("sampling-cost")
def sampling_cost(results: Results) -> str:
    return sampling_table(results, "sampling")


@figure("sampling-cost-100k")
def sampling_cost_100k(results: Results) -> str:
    return sampling_table(results, "sampling_100k")


def sampling_table(results: Results, name: str) -> str:
    """``bench/sample_cost.py``'s figures: each sample size against the full fit, per method."""
    result = results(name)
    rows = result["rows"]
    labels = {"attn-tsne": "attn-tsne", "tsne": "t-SNE", "umap": "UMAP", "attn-umap": "attn-umap"}
    heads = ", ".join(f"{layer}/{head}" for layer, head in result["heads"])
    tables = []
    for method in dict.fromkeys(row["method"] for row in rows):
        default = defaults(method).get("sample")
        of = {sample: [r for r in rows if r["method"] == method and r["sample"] == sample]
              for sample in dict.fromkeys(r["sample"] for r in rows if r["method"] == method)}
        lines = [f"| {labels.get(method, method)}, a run of at most {result['tokens']:,} tokens (layers/heads {heads}) | recall@10 | "
                 "trustworthiness | s / head |", "|---|---|---|---|"]
        for sample in sorted(of, key=lambda size: size or float("inf")):
            found = of[sample]
            label = "full fit" if sample == 0 else f"sample {sample:,}"
            if sample and sample >= result["tokens"]:
                label += " (every token: a full fit)"
            elif sample == default:
                label = f"**{label} (default)**"
            lines.append(f"| {label} | {mean(r['recall'] for r in found):.3f} | {mean(r['trust'] for r in found):.3f} | "
                         f"{mean(r['seconds'] for r in found):.1f} |")
        text = "\n".join(lines) + "\n"
        if 0 in of and default in of and default < result["tokens"]:
            full, ours = of[0], of[default]
            below = mean(r["trust"] for r in full) - mean(r["trust"] for r in ours)
            text += (f"\nAt the default sample: {mean(r['recall'] for r in ours) / mean(r['recall'] for r in full):.0%} "
                     f"of the full fit's recall, trustworthiness {abs(below):.3f} {'below' if below >= 0 else 'above'} "
                     f"the full fit's, in {mean(r['seconds'] for r in ours) / mean(r['seconds'] for r in full):.0%} "
                     "of its time.\n")
        tables.append(text)
    arguments = result["arguments"]
    return ("\n".join(tables) + f"\n`bench/sample_cost.py --tokens {result['tokens']} --heads {arguments['heads']} "
            f"--samples {arguments['samples']} --methods {arguments['methods']}` ({source(results, name)}).\n")


#: the report's spaces in the order the page explains them, and what each is
SPACES = (("original", "original (stored vectors)"), ("translated", "translated"),
          ("translated+scaled", "translated+scaled (what is projected)"))


@figure("correlation-spaces")
def correlation_spaces(results: Results) -> str:
    """Each space's mean correlations over the run's heads, from ``bench/report.py``'s copy of the report."""
    result = results("report_spaces")
    spaces = result["correlation"]
    layouts = sorted(space for space in spaces if space not in dict(SPACES))
    rows = []
    for space, label in (*SPACES, *((space, space) for space in layouts)):
        if space not in spaces:
            continue
        row = spaces[space]
        strongest = row["strongest"]
        recall = (f"{(row['recall_query'] + row['recall_key']) / 2:.3f}" if "recall_query" in row and "recall_key" in row
                  else "–")
        rows.append(f"| {label} | {row['pearson']:.3f} | {row['spearman']:.3f} | {row['query_spearman']:.3f} | "
                    f"{row['share_pearson_le_minus_half']:.0%} | {strongest['pearson']:.3f} (L{strongest['layer']} "
                    f"H{strongest['head']}) | {recall} |")
    return (f"MiniLM, all {result['heads']} heads over {result['tokens']:,} tokens of the bundled corpus, every "
            f"attending pair (means over the heads; a strongly negative correlation means near is a high dot "
            f"product):\n\n"
            "| space | Pearson | Spearman | query Spearman | heads with Pearson ≤ −0.5 | most negative head | "
            "partner recall@10 |\n|---|---|---|---|---|---|---|\n" + "\n".join(rows) +
            f"\n\nThe run's layouts: `qkviz project --method {result['arguments']['methods']}` at the defaults "
            f"(PCA in 2D and 3D, the t-SNE methods in 2D). `bench/report.py --methods {result['arguments']['methods']}` "
            f"({source(results, 'report_spaces')}).\n")
