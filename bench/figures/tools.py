"""Figure blocks rendered from ``bench/results/*.json``; registered with :func:`bench.figures.results.figure` when imported.

This module's area: extraction (its goal, long inputs, images), the report's pages, the head atlas
(``bench/stats.py``), related heads (``bench/related.py``) and compare / selection (``bench/compare.py``), on
docs/benchmarks.md, docs/atlas.md and docs/images.md.
"""

from __future__ import annotations

import re

from bench.figures.results import Results, figure, minutes, model_name, source, span
from bench.figures.goals import Goal, verdict

#: issue 17's goals for the report's pages: each page as a browser opens it cold (its own bytes and every script it
#: loads, shared or not), and from the open to every graph drawn
PAGE_SIZE = Goal("a report page's size", 1.5, "MB", True, "report_pages", "the largest page, read cold",
                 lambda found: max(cold_bytes(row) for row in report_page_rows(found)) / 1e6, 2)
PAGE_TIME = Goal("a report page open, every graph drawn", 2.0, "s", True, "report_pages",
                 "the slowest page, median of the cold opens",
                 lambda found: max(row["drawn"] for row in report_page_rows(found)) / 1e3, 2)
#: extraction's goals: a ratio over a bare forward pass (wall times), a peak at 100,000 tokens
EXTRACT_RATIO = Goal("`qkviz.extract` against a bare forward pass", 1.25, "", True, "extract_minilm",
                     "median of the pairs", lambda found: found["ratio"]["median"], 2)
EXTRACT_PEAK = Goal("peak RSS of an extraction at 100,000 tokens", 4, "GB", True, "extract_minilm",
                    "the child process's peak", lambda found: found["child_extract"]["peak_mb"] / 1024, 2)
#: extracting one 8,192-token document (issue 28): memory beyond the weights, for each stored dtype
BEYOND_WEIGHTS_GB = 2.0
#: the head atlas's statistics at 72 heads, wall time of ``qkviz stats`` in a child process
STATS_TIME = Goal("`qkviz stats` with every statistic at 72 heads", 120, "s", True, "stats",
                  "wall time, median", lambda found: next((row["seconds"]["median"] for row in found["timings"]
                                                           if row["heads"] == 72), None), 1)


def report_page_rows(result: dict) -> list[dict]:
    """The report's pages in ``bench/report_pages.py``'s result, without the floor (plotly.js alone)."""
    return [row for row in result["pages"] if row["page"] != "floor.html"]


def cold_bytes(row: dict) -> int:
    """What a browser reads to open a page cold: the page and every script it loads."""
    return row["own"] + sum(row["scripts"].values())


def beyond_weights(dtype: str) -> Goal:
    return Goal(f"extracting one 8,192-token document stored as {dtype}, memory beyond the weights",
                BEYOND_WEIGHTS_GB, "GB", True, "long_inputs", "the process tree's peak less the weights",
                lambda found: next((row["beyond_weights_gb"] for row in found["results"] if row["dtype"] == dtype), None),
                2)


def run_name(row: dict) -> str:
    return model_name(row["run"])


def head_name(pair) -> str:
    return f"L{pair[0]} H{pair[1]}"


# -- extraction ------------------------------------------------------------------------------------
@figure("extract-goal")
def extract_goal(results: Results) -> str:
    result = results("extract_minilm")
    child = result["child_extract"]
    return (f"Goals: the ratio over a bare forward pass {verdict(EXTRACT_RATIO, results)}; peak RSS at 100,000 tokens "
            f"{verdict(EXTRACT_PEAK, results)}, at {child['tokens']:,} tokens. "
            f"({source(results, 'extract_minilm')}.)\n")


def load_range(loads: list[float]) -> str:
    low, high = f"{min(loads):.0f}", f"{max(loads):.0f}"
    return low if low == high else f"{low}–{high}"


@figure("long-inputs")
def long_inputs(results: Results) -> str:
    result = results("long_inputs")
    model = result["model"]
    rows = "\n".join(
        f"| {row['dtype']} | {minutes(row['seconds'])} (load {load_range(row['load_average'])}) "
        f"| {row['peak_gb']:.2f} GB | {row['beyond_weights_gb']:.2f} GB | {verdict(beyond_weights(row['dtype']), results)} |"
        for row in result["results"])
    tokens = result["results"][0]["document_tokens"]
    return (f"A model of {model['layers']} layers × {model['heads']} query heads over {model['kv_heads']} key-value "
            f"heads (head size {model['head_dim']}, context {model['context']:,}; weights {model['weights_gb']:.2f} GB), "
            f"one document of {tokens:,} tokens:\n\n"
            f"| stored dtype | wall | peak RSS | beyond the weights | goal (issue 28): memory beyond the weights |\n"
            f"|---|---|---|---|---|\n{rows}\n\n"
            f"`bench/long_inputs.py` ({source(results, 'long_inputs')}).\n")


@figure("extract-images")
def extract_images(results: Results) -> str:
    result = results("extract_images")
    bare, full, images = result["bare_seconds"], result["extract_seconds"], result["images"]
    arguments = result["arguments"]
    return (f"{result['model']}: {result['layers']} layers × {result['heads']} heads, d_head {result['head_dim']}, "
            f"{images} images, {result['tokens']:,} tokens ({result['tokens'] // images} an image), "
            f"{arguments['dtype']} storage, batch {arguments['batch_size']}.\n\n"
            f"| min / median / max of {full['runs']} pairs | |\n|---|---|\n"
            f"| bare forward pass | {span(bare, 2)} ({images / bare['median']:.1f} images/s) |\n"
            f"| `qkviz.extract` (processing, capture, vectors, patch thumbnails, weight hash, manifest) | "
            f"{span(full, 2)} ({images / full['median']:.1f} images/s, {result['tokens'] / full['median']:,.0f} tokens/s) |\n"
            f"| extract / bare forward | {span(result['ratio'], 2, '')} |\n"
            f"| run directory | {result['run_mb']:.0f} MB, of which patch thumbnails {result['patches_mb']:.1f} MB |\n\n"
            f"`bench/extract_images.py --repeats {arguments['repeats']}` ({source(results, 'extract_images')}).\n")


# -- the report's pages ----------------------------------------------------------------------------
@figure("report-pages")
def report_pages(results: Results) -> str:
    result = results("report_pages")
    floor = next(row for row in result["pages"] if row["page"] == "floor.html")
    pages = report_page_rows(result)
    rows = [f"| `{row['page']}` | {row['own'] / 1e6:.2f} MB | {sum(row['scripts'].values()) / 1e6:.2f} MB, once | "
            f"{cold_bytes(row) / 1e6:.2f} MB | {row['drawn'] / 1e3:.2f} s | {row['cpu'] / 1e3:.2f} s | "
            f"{row['drawn_graphs']} of {row['graphs']} |" for row in pages]
    rows.append(f"| plotly.js alone (one 2 × 2 heatmap) | | {sum(floor['scripts'].values()) / 1e6:.2f} MB | "
                f"{cold_bytes(floor) / 1e6:.2f} MB | {floor['drawn'] / 1e3:.2f} s | {floor['cpu'] / 1e3:.2f} s | |")
    refused = sum(row["refused"] for row in result["pages"])
    errors = sum(len(row["errors"]) for row in result["pages"])
    # layouts as method-dimD (a result of an earlier bench/report_pages.py named the projections folder's entries)
    layouts = ", ".join(name for name in result.get("run_layouts") or [] if re.fullmatch(r"[\w-]+-\dd", name))
    return ("| page | size | + shared plotly.js | read cold | open, every graph drawn | main-thread CPU | graphs drawn |\n"
            "|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            f"Medians of {result['arguments']['repeats']} cold opens{f'; the run has {layouts} layouts' if layouts else ''}. "
            f"Goals (issue 17), each page as a browser opens it cold: size {verdict(PAGE_SIZE, results)}; time to "
            f"open {verdict(PAGE_TIME, results)}. Requests refused: {refused}; console errors: {errors}. "
            f"`bench/report_pages.py --repeats {result['arguments']['repeats']}` ({source(results, 'report_pages')}).\n")


# -- the head atlas --------------------------------------------------------------------------------
#: the logit decomposition's terms as the atlas page explains them
SHARE_NAMES = {"key_prior": "key prior (query bias · key)", "query_constant": "constant per query (key bias)",
               "bias_bias": "bias · bias", "positional": "position (rotary)"}


def percent(value: float) -> str:
    return f"{value:.1%}"


def atlas_rows(run: dict) -> dict[str, str]:
    labels = ", ".join(f"{label} {count}" for label, count in run["labels"].items())
    none = [str(layer) for layer, share in enumerate(run["first_token_share_by_layer"]) if share == 0]
    sink = f"{run['first_token_share']:.0%}" + (f" (none in layers {', '.join(none)})" if none else "")
    shares = ", ".join(f"{SHARE_NAMES.get(name, name.replace('_', ' '))} {percent(value)}"
                       for name, value in run["logit_shares"].items()
                       if abs(value) >= 0.0005)   # terms a model has but that carry nothing (a zero bias) left out
    rows = {"labels": labels, "heads labelled first-token (sink)": sink,
            "queries whose strongest key is the first token / a later delimiter ([SEP], punctuation)":
                f"{percent(run['argmax_first'])} / {percent(run['argmax_delimiter'])}",
            "mean attention to special tokens ([CLS], [SEP]) / to the first token":
                f"{percent(run['special_attention'])} / {percent(run['first_token_attention'])}",
            "logit variance shares (mean over heads)": shares}
    split = run.get("first_layer_split")
    if split:
        strongest = run["most_positional_first_layer_head"]
        rows["first layer, token / position split (mean over its heads)"] = (
            ", ".join(f"{'rest' if name == 'embedding_other' else name.replace('_', '·')} {percent(value)}"
                      for name, value in split.items())
            + f"; the most positional head L0 H{strongest['head']} ({strongest['label']}): position·position "
              f"{percent(strongest['position_position'])}")
    else:
        rows["first layer, token / position split (mean over its heads)"] = "(no absolute positions)"
    if "update_ratio_median" in run:
        rows["head update: median norm ratio, mean cosine"] = \
            f"{run['update_ratio_median']:.3f}, {run['update_cosine_mean']:+.3f}"
    if "dependency_alignment" in run:
        alignment = run["dependency_alignment"]
        rows["dependency alignment, mean / max"] = (
            f"{alignment['mean']:.3f} / {alignment['max']:.3f} (L{alignment['max_layer']} H{alignment['max_head']}, "
            f"{alignment['max_label']})")
    return rows


def stats_timings(results: Results) -> str:
    timings = []
    for row in results("stats")["timings"]:
        runs = row["seconds"]["runs"]
        seconds = (span(row["seconds"]) + f" (min / median / max of {runs})" if runs > 1
                   else f"{row['seconds']['median']:.1f} s (one run)")
        goal = f" (goal at 72 heads {verdict(STATS_TIME, results)})" if row["heads"] == 72 else ""
        timings.append(f"{run_name(row)}, {row['heads']} heads at {row['tokens']:,} tokens: {seconds}, "
                       f"peak RSS {row['peak_mb']:,.0f} MB{goal}")
    return "; ".join(timings)


@figure("atlas-findings")
def atlas_findings(results: Results) -> str:
    result = results("stats")
    runs = result["runs"]
    table = [atlas_rows(run) for run in runs]
    names = list(dict.fromkeys(name for rows in table for name in rows))
    header = "| | " + " | ".join(f"{run_name(run)} ({run['layers'] * run['heads']} heads)" for run in runs) + " |"
    body = "\n".join(f"| {name} | " + " | ".join(rows.get(name, "") for rows in table) + " |" for name in names)
    return (f"{header}\n|---|{'---|' * len(runs)}\n{body}\n\n"
            f"`qkviz stats --syntax` with every statistic, in a child process: {stats_timings(results)}. "
            f"`bench/stats.py` ({source(results, 'stats')}).\n")


@figure("stats-time")
def stats_time(results: Results) -> str:
    result = results("stats")
    return (f"{stats_timings(results)}. `bench/stats.py --repeats {result['arguments']['repeats']}` with "
            f"`--also` the SmolLM2 run ({source(results, 'stats')}).\n")


# -- related heads ---------------------------------------------------------------------------------
def related_runs(results: Results) -> list[dict]:
    return results("related")["runs"]


@figure("related-cost")
def related_cost(results: Results) -> str:
    parts = [f"{run_name(row)}: {row['queries']:,} queries in {row['sentences']} sentences, "
             f"{row['query_key_pairs']:,} query-key pairs, so {8 * row['layers'] * row['heads'] * row['query_key_pairs'] / 1e6:.0f} MB "
             f"of attention; the command {span(row['seconds'])} (min / median / max of {row['seconds']['runs']}), "
             f"peak RSS {row['peak_mb']:,.0f} MB" for row in related_runs(results)]
    return f"{'; '.join(parts)}. `bench/related.py` ({source(results, 'related')}).\n"


@figure("related-time")
def related_time(results: Results) -> str:
    rows = related_runs(results)
    header = "| `qkviz related`, default sample | " + " | ".join(
        f"{run_name(row)} ({row['layers'] * row['heads']} heads, {row['head_pairs']:,} head pairs)" for row in rows) + " |"
    lines = [("queries (sentences)", lambda row: f"{row['queries']:,} ({row['sentences']})"),
             ("its own compute time (`related.json`)", lambda row: span(row["compute_seconds"])),
             ("the command, start to end", lambda row: span(row["seconds"])),
             ("peak RSS of the command", lambda row: f"{row['peak_mb']:,.0f} MB")]
    body = "\n".join(f"| {name} | " + " | ".join(value(row) for row in rows) + " |" for name, value in lines)
    runs = rows[0]["seconds"]["runs"]
    return (f"{header}\n|---|{'---|' * len(rows)}\n{body}\n\nMin / median / max of {runs} runs. "
            f"`bench/related.py --repeats {runs}` ({source(results, 'related')}).\n")


def one_group(row: dict) -> str:
    """", one key-value head" when the closest pair of a grouped-keys run shares one."""
    a, b, size = row["closest"]["a"], row["closest"]["b"], row["heads"] // row["kv_heads"]
    return ", one key-value head" if size > 1 and a[0] == b[0] and a[1] // size == b[1] // size else ""


@figure("related-findings")
def related_findings(results: Results) -> str:
    rows = related_runs(results)
    layers = "; ".join(f"{run_name(row)} {row['js_within_layer']:.2f} / {row['js_layers_apart']:.2f}" for row in rows)
    alike = all(row["js_within_layer"] < row["js_layers_apart"] for row in rows)
    lines = [f"- {'Heads of one layer attend more alike' if alike else 'Heads of one layer do not always attend more alike'}: "
             f"mean JS distance within a layer / between layers two or more apart: {layers}. The most heads of each "
             "layer that stand side by side in the clustering order, layer by layer: "
             + "; ".join(f"{run_name(row)} (of {row['heads']}) {' '.join(map(str, row['longest_together_by_layer']))}"
                         for row in rows) + "."]
    for row in rows:
        previous = row.get("previous_token")
        if previous:
            heads = ", ".join(head_name(pair) for pair in previous["heads"])
            lines.append(f"- {run_name(row)}'s {len(previous['heads'])} previous-token heads ({heads}): mean JS distance "
                         f"{previous['js_among']:.2f} among them, {previous['js_to_others']:.2f} to the other heads.")
    closest = [f"{run_name(row)} {head_name(row['closest']['a'])} and {head_name(row['closest']['b'])}"
               f"{one_group(row)} (JS distance {row['closest']['js']:.3f}, CKA {row['closest']['cka']:.2f})"
               for row in rows]
    lines.append(f"- The closest pair of heads: {'; '.join(closest)}.")
    spearman = ", ".join(f"{row['spearman_js_cka']:+.2f} on {run_name(row)}" for row in rows)
    lines.append(f"- JS distance against CKA over the head pairs: Spearman {spearman} (a strong agreement would be "
                 "near −1: a small distance with a high similarity).")
    for row in rows:
        grouped = row.get("grouped_keys")
        if grouped:
            lines.append(f"- {run_name(row)} (grouped keys, {row['heads'] // row['kv_heads']} query heads a key-value "
                         f"head): the highest-CKA partner shares the head's key-value head for "
                         f"{grouped['top_cka_partner_shares_kv_head']:.0%} of heads; mean CKA "
                         f"{grouped['cka_within_group']:.2f} within a group, {grouped['cka_other_groups_of_layer']:.2f} "
                         "with the layer's other groups.")
    return "\n".join(lines) + f"\n\n`bench/related.py` ({source(results, 'related')}).\n"


# -- compare and selection -------------------------------------------------------------------------
@figure("compare")
def compare(results: Results) -> str:
    result = results("compare")
    runs = result["compare_seconds"]["runs"]
    itself = (" with a copy of itself (every head's distance is then 0, as the bench checks)" if result["with_itself"]
              else " with another run")
    browser = result.get("browser_seconds")
    text = (f"`qkviz compare` of the {model_name(result['model'])} run ({result['tokens']:,} tokens)"
            f"{itself}, {result['heads']} heads, end to end in a child process: {span(result['compare_seconds'])} "
            f"(min / median / max of {runs}), peak RSS {result['compare_peak_mb']:,.0f} MB. The server's work for a "
            f"selection of {result['selection_points']:,} points (checking the payload, the table of every point for "
            f"the CSV, the page's first rows): {span(result['selection_seconds'], 2)}; the CSV ({result['csv_mb']:.1f} MB): "
            f"{span(result['csv_seconds'], 2)}.")
    if browser:
        text += (f" In headless Chromium, a box over the whole PCA layout of L0 H0 (all {2 * result['tokens']:,} "
                 f"queries and keys) shows its table "
                 + (f"{span(browser, 2)} (min / median / max of {browser['runs']})" if browser["runs"] > 1
                    else f"{browser['median']:.2f} s (one run)") + " after the mouse is released.")
    flags = f" --repeats {result['arguments']['repeats']}" + (" --browser" if browser else "") + (
        f" --browser-repeats {result['arguments']['browser_repeats']}" if browser and "browser_repeats" in result["arguments"]
        else "")
    return f"{text} `bench/compare.py{flags}` ({source(results, 'compare')}).\n"
