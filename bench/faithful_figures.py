"""The figure blocks drawn from ``bench.faithful``'s result files (``bench/results/faithful_*.json``,
``umap_sweep_*.json``): what the pages say from them (``python -m bench.figures``; each registered by name with
``@figure``, a goal judged by ``bench.figures.goals.verdict``). The bench itself, which measures the layouts and
writes those files, is :mod:`bench.faithful`."""

from __future__ import annotations

from statistics import mean

from qkviz.neighbours import RECALL_GOAL, TRUST_GOAL

from bench.figures.goals import Goal, verdict
from bench.figures.results import BUNDLED, Results, figure, model_name, source

#: docs/methods.md's chosen-heads tables: each method as they name it
CHOSEN_METHODS = {"pca": "PCA", "tsne": "t-SNE", "umap": "UMAP", "av-tsne": "AttentionViz t-SNE",
                  "attn-tsne": "**attn-tsne**", "attn-umap": "attn-umap"}

HIDE_METHODS = {"attn-tsne": "attn-tsne", "attn-tsne-hide1": "attn-tsne `--hide-first-token`",
                "attn-umap": "attn-umap", "attn-umap-hide1": "attn-umap `--hide-first-token`"}

def chosen_results(results: Results) -> dict[str, dict]:
    """``bench/results/faithful_chosen_<model>.json`` for each bundled model that has one, by model."""
    return {model: results(f"faithful_chosen_{model}") for model in BUNDLED if results.exists(f"faithful_chosen_{model}")}

def method_rows(result: dict, method: str) -> list[dict]:
    return [row for row in result["rows"] if row["method"] == method]

def mean_of(rows: list[dict], key: str) -> float:
    return sum(row[key] for row in rows) / len(rows)

def chosen_heads(result: dict) -> tuple[dict, dict, list]:
    """attn-tsne's and t-SNE's rows of the chosen heads by (layer, head), and the heads both measured."""
    ours = {(r["layer"], r["head"]): r for r in method_rows(result, "attn-tsne")}
    tsne = {(r["layer"], r["head"]): r for r in method_rows(result, "tsne")}
    return ours, tsne, [head for head in ours if head in tsne]

def over_heads(result: dict, value, pick=min) -> float | None:
    """The lowest (``pick=max``: highest) of ``value(attn-tsne's row, t-SNE's row)`` over the heads both measured."""
    ours, tsne, heads = chosen_heads(result)
    return pick(value(ours[head], tsne[head]) for head in heads) if heads else None

def attn_goals(model: str) -> list[Goal]:
    """attn-tsne's goals (issue 22) on every chosen head of ``model``, each judged on its lowest head."""
    name = f"faithful_chosen_{model}"
    return [Goal("partner recall@10 on every head", RECALL_GOAL, "", False, name, "lowest head",
                 lambda found: over_heads(found, lambda ours, tsne: ours["recall"]), 3),
            Goal("partner recall against t-SNE's on every head", 3, "×", False, name, "lowest head",
                 lambda found: over_heads(found, lambda ours, tsne: ours["recall"] / max(tsne["recall"], 1e-9)), 1),
            Goal("trustworthiness on every head", TRUST_GOAL, "", False, name, "lowest head",
                 lambda found: over_heads(found, lambda ours, tsne: ours["trust"]), 3),
            Goal("time against t-SNE's on every head", 1, "×", True, name, "slowest head",
                 lambda found: over_heads(found, lambda ours, tsne: ours["seconds"] / tsne["seconds"], max), 2)]

def attn_verdicts(model: str, result: dict, results: Results) -> str:
    """attn-tsne against the goals on ``model``'s chosen heads (what ``bench/faithful.py`` prints as its goals)."""
    ours, tsne, heads = chosen_heads(result)
    if not heads:
        return ""
    recall, ratio, trust, time = attn_goals(model)
    low = min(heads, key=lambda head: ours[head]["recall"])
    return (f"{BUNDLED[model]}, {len(heads)} heads: recall {verdict(recall, results)}, at L{low[0]} H{low[1]}; "
            f"recall against t-SNE {verdict(ratio, results)}; trustworthiness {verdict(trust, results)}; time "
            f"against t-SNE {verdict(time, results)}")

@figure("faithful-chosen")
def faithful_chosen(results: Results) -> str:
    chosen = chosen_results(results)
    rows = []
    for model, result in chosen.items():
        for method, label in CHOSEN_METHODS.items():
            measured = method_rows(result, method)
            if measured:
                heads = len({(r["layer"], r["head"]) for r in measured})
                rows.append(f"| {BUNDLED[model]} {label} ({heads} heads) | {mean_of(measured, 'recall'):.3f} | "
                            f"{mean_of(measured, 'trust'):.3f} | {mean_of(measured, 'seconds'):.1f} |")
    absent = [f"{BUNDLED[model]}: " + ", ".join(label.strip("*") for method, label in CHOSEN_METHODS.items()
                                                 if not method_rows(result, method))
              for model, result in chosen.items()]
    absent = [text for text in absent if not text.endswith(": ")]
    goals = "; ".join(text for text in (attn_verdicts(model, result, results) for model, result in chosen.items())
                      if text)
    return ("| mean over the chosen heads | recall@10 | trustworthiness | s / head |\n|---|---|---|---|\n"
            + "\n".join(rows) + "\n\n"
            + (f"Not measured in these files: {'; '.join(absent)}. " if absent else "")
            + (f"attn-tsne against the goals on every chosen head: {goals}. " if goals else "")
            + f"`bench/faithful.py --model` ({source(results, *(f'faithful_chosen_{m}' for m in chosen))}).\n")

def sink_results(results: Results) -> dict[str, str]:
    """For each bundled model, the result file of its chosen heads with the most of the hide-first-token variants:
    ``faithful_hide_<model>`` (``bench/faithful.py --model M --methods attn-tsne,attn-tsne-hide1,... --json``) when
    there is one, else ``faithful_chosen_<model>``."""
    names = {}
    for model in BUNDLED:
        for name in (f"faithful_hide_{model}", f"faithful_chosen_{model}"):
            if results.exists(name):
                names[model] = name
                break
    return names

@figure("faithful-sinks")
def faithful_sinks(results: Results) -> str:
    names = sink_results(results)
    rows = []
    for model, name in names.items():
        for method, label in HIDE_METHODS.items():
            measured = method_rows(results(name), method)
            if not measured:
                continue
            sinks = [r for r in measured if r.get("kind") == "sink"]
            near = f"{mean_of(sinks, 'sink_near'):.2f}" if sinks else "no sink head"
            rows.append(f"| {BUNDLED[model]} {label} ({len(measured)} heads) | {mean_of(measured, 'recall'):.3f} | "
                        f"{mean_of(measured, 'recall_beyond_first'):.3f} | {mean_of(measured, 'trust'):.3f} | {near} |")
    lacking = [BUNDLED[model] for model, name in names.items()
               if not method_rows(results(name), "attn-tsne-hide1")]
    runs = "; ".join(f"{BUNDLED[model]}: {results(name)['n_tokens']:,} tokens"
                     + (" (the whole bundled corpus)" if results(name)["arguments"].get("model") else
                        " (the bundled corpus, capped at that)")
                     for model, name in names.items() if results(name).get("n_tokens"))
    return ("| mean over the chosen heads | recall@10 | beyond-first | trustworthiness | sink-near (sink heads) |\n"
            "|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            + (f"`--hide-first-token` not measured on {' and '.join(lacking)}. " if lacking else "")
            + (f"{runs}. " if runs else "")
            + f"`bench/faithful.py` ({source(results, *names.values())}).\n")

#: the layouts' goals on every measured head (issue 22): trustworthiness and partner recall@10 (kept in qkviz.neighbours,
#: where the report and the app judge them too)

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


# -- Faithful against each head's ceiling (issue 53): bench/faithful_ceiling.py ----------------------------------
#: the share of plain t-SNE's trustworthiness a head's default layout should keep (bench.faithful_ceiling's)
CEILING_SHARE = 0.97


#: further draws of held-out heads (another seed of the same bench), each judged by the same goal on its own page line
OTHER_DRAWS = {model: [f"faithful_ceiling_{model}_seed{seed}" for seed in (1, 2)] for model in ("minilm", "smollm2")}


def ceiling_goal(model: str, result: dict, name: str | None = None) -> Goal:
    """Issue 53's goal on ``model``: heads whose default layout keeps recall and its share of the ceiling, both."""
    needed, of = result["goal_heads"]
    measured = len(result["rows"])
    return Goal(f"{model_name(model)} heads faithful against their ceiling", needed, "heads", False,
                name or f"faithful_ceiling_{model}", f"of {measured} heads measured (the goal names {of}), with recall ≥ "
                f"{RECALL_GOAL:.2f} and ≥ {CEILING_SHARE:.2f} of t-SNE's trustworthiness, both",
                lambda found: found["summary"]["default"]["meets"], digits=0)


def ceiling_share_stated() -> str:
    """``≥ 0.97``: the share of the ceiling's trustworthiness a head should keep, as a block states a bound."""
    return Goal("share of the ceiling", CEILING_SHARE, "", False, "", "", lambda _: None, digits=2).stated()


@figure("faithful-ceiling")
def faithful_ceiling(results: Results) -> str:
    names = {model: f"faithful_ceiling_{model}" for model in BUNDLED if results.exists(f"faithful_ceiling_{model}")}
    share = ceiling_share_stated()
    recall = Goal("partner recall@10", RECALL_GOAL, "", False, "", "", lambda _: None, digits=2).stated()
    lines = ["| head | t-SNE trust (ceiling) | default: recall / trust / share | α chosen "
             "| former defaults (α 0.5 fixed): recall / trust / share |", "|---|---|---|---|---|"]
    verdicts, notes = [], []
    for model, name in names.items():
        result = results(name)
        for row in result["rows"]:
            ours, fixed = row["default"], row["fixed"]
            mark = " ✓" if ours["meets"] else ""
            lines.append(f"| {model_name(model)} L{row['layer']} H{row['head']} | {row['ceiling']['trust']:.3f} | "
                         f"{ours['recall']:.3f} / {ours['trust']:.3f} / **{ours['trust_share']:.3f}**{mark} | "
                         f"{ours['alpha']:g} | {fixed['recall']:.3f} / {fixed['trust']:.3f} / "
                         f"{fixed['trust_share']:.3f} |")
        summary = result["summary"]
        verdicts.append(f"{model_name(model)}: {verdict(ceiling_goal(model, result), results)}")
        notes.append(f"{model_name(model)}, {result['tokens']:,} tokens"
                     + ("" if result["complete"] else " (**incomplete**: the run stopped before its last head)")
                     + f": default {summary['default']['recall_met']} heads at recall {recall}, "
                     f"{summary['default']['share_met']} at share {share} (shares {summary['default']['share_min']:.3f}"
                     f"–{summary['default']['share_max']:.3f}, median {summary['default']['share_median']:.3f}); "
                     f"α 0.5 fixed {summary['fixed']['meets']} heads both, {summary['fixed']['recall_met']} at recall, "
                     f"{summary['fixed']['share_met']} at share (median {summary['fixed']['share_median']:.3f}); "
                     f"layout seconds default / fixed {summary['seconds_ratio']:.2f}×"
                     + earlier_ceilings(result.get("earlier_runs", [])))
    return ("\n".join(lines) + "\n\n✓: the head meets both conditions. " + "; ".join(verdicts) + ". "
            + ". ".join(notes) + ". Share: the layout's trustworthiness over plain t-SNE's (openTSNE's defaults) on "
            "the same aligned points. `bench/faithful_ceiling.py --model M` on held-out text "
            f"({source(results, *names.values())}).\n")


def earlier_ceilings(runs: list[dict]) -> str:
    """The earlier runs of a ceiling bench's file, every one kept (the goal judges the latest)."""
    if not runs:
        return ""
    return " (earlier runs, every one kept: " + "; ".join(
        f"{run['date'][:10]}, {run['settings']}: {run['meets']} of {run['heads']} heads both, {run['recall_met']} at "
        f"recall, {run['share_met']} at share" for run in runs) + ")"


@figure("faithful-ceiling-draws")
def faithful_ceiling_draws(results: Results) -> str:
    """The same bench on another seed's heads of the same held-out runs: each draw with its own verdict."""
    lines = []
    drawn = [(model, name) for model, names in OTHER_DRAWS.items() for name in names if results.exists(name)]
    for model, name in drawn:
        result, seed = results(name), results.record(name)["arguments"]["seed"]
        heads = ", ".join(f"L{row['layer']} H{row['head']}{' ✓' if row['default']['meets'] else ''}"
                          for row in result["rows"])
        summary = result["summary"]
        incomplete = "" if result["complete"] else " (**incomplete**: the run stopped before its last head)"
        lines.append(f"- {model_name(model)}, heads drawn with seed {seed} ({heads}){incomplete}: "
                     f"{verdict(ceiling_goal(model, result, name), results)}; {summary['default']['recall_met']} at "
                     f"recall, {summary['default']['share_met']} at share (median "
                     f"{summary['default']['share_median']:.3f}); the former defaults {summary['fixed']['meets']} of "
                     f"{len(result['rows'])} both.")
    if not lines:
        return "No other draw measured yet: `bench/faithful_ceiling.py --run RUN --seed 1 --out ...`.\n"
    tokens = ", ".join(dict.fromkeys(f"{model_name(model)} {results(name)['tokens']:,}" for model, name in drawn))
    return ("\n".join(lines) + "\n\n✓: the head meets both conditions. The same held-out runs as above "
            f"(*Paradise Lost*; tokens: {tokens}), other heads ({source(results, *(name for _, name in drawn))}).\n")
