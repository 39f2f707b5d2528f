"""The README's summary blocks, each combining several benches' result files (the faithful layouts, the modern
model, the index's summary, the modern-scale table); registered with :func:`bench.figures.results.figure` when
imported. Every block drawn from one bench's results lives beside that bench (``@figure`` in ``bench/NAME.py``)."""

from __future__ import annotations

from bench.document_view import DOCUMENT_OPEN, DOCUMENT_SWITCH
from bench.figures.goals import verdict
from bench.figures.results import Results, figure, minutes, source
from bench.long_inputs import beyond_weights
from bench.matrix_grid import MATRIX_1024, MATRIX_1024_WARM, MATRIX_FILL
from bench.modern_scale import STATS_1024
from bench.thousand_heads import LAYOUTS_1024, RECALL_RATIO_EVERY_HEAD, RECALL_RATIO_MEAN


def faithful_cell(mean: dict, method: str) -> str:
    row = mean[method]
    return f"{row['recall']:.3f} / {row['trust']:.3f}"


@figure("faithful")
def faithful(results: Results) -> str:
    result = results("faithful_sample")
    models = result["models"]
    names = {"minilm": "MiniLM", "smollm2": "SmolLM2"}
    labels = {"attn-tsne": "**attn-tsne** (default)", "tsne": "t-SNE", "umap": "UMAP", "pca": "PCA"}
    methods = [m for m in labels if all(m in models[model]["mean"] for model in models)]
    first = next(iter(models))
    header = ("| recall@10 / trustworthiness | " + " | ".join(names.get(m, m) for m in models)
              + f" | s / head ({names.get(first, first)}) |")
    rows = [f"| {labels[m]} | " + " | ".join(faithful_cell(models[model]["mean"], m) for model in models)
            + f" | {models[first]['mean'][m]['seconds']:.1f} |" for m in methods]
    chosen = [name for name in (f"faithful_chosen_{model}" for model in models) if results.exists(name)]
    if chosen:
        means = {model: results(f"faithful_chosen_{model}")["means"] if f"faithful_chosen_{model}" in chosen else None
                 for model in models}
        count = len({(r["layer"], r["head"]) for r in results(chosen[0])["rows"]})
        rows.append(f"| attn-tsne, {count} heads **chosen** (sinks, hardest), tuning corpus | "
                    + " | ".join(faithful_cell(means[model], "attn-tsne") if means[model] else "not measured"
                                 for model in models) + " | |")
    attn = {model: [r for r in models[model]["rows"] if r["method"] == "attn-tsne"] for model in models}
    below = ", ".join(f"{sum(r['recall'] < 0.30 for r in rows_)} of {len(rows_)} {names.get(model, model)} heads"
                      for model, rows_ in attn.items())
    untrusted = ", ".join(f"{sum(r['trust'] < 0.90 for r in rows_)} of {len(rows_)}" for rows_ in attn.values())
    tokens = " and ".join(f"{models[model]['tokens']:,}" for model in models)
    heads = next(iter(models.values()))["heads"]
    return (f"Partner recall@10 (of a token's 10 strongest partners, the share among its 10 nearest points of the "
            f"other kind) / trustworthiness, mean of **{len(heads)} random heads per model** (seed "
            f"{result['arguments']['seed']}) over {tokens} tokens of *Paradise Lost* (`data/classics.txt`), a text no "
            f"default was tuned on:\n\n{header}\n|---|" + "---|" * (len(models) + 1) + "\n" + "\n".join(rows)
            + f"\n\nattn-tsne's recall is below 0.30 on {below}; its trustworthiness below 0.90 on {untrusted}. "
            f"`bench/faithful_sample.py` ({source(results, 'faithful_sample')})"
            + (f"; the chosen heads: `bench/faithful.py --model` ({source(results, *chosen)})" if chosen else "") + ".\n")


@figure("modern")
def modern(results: Results) -> str:
    grid, document = results("matrix_grid"), results("document_view")
    layouts, commands = results("thousand_heads"), results("modern_scale")["commands"]
    fill = next(iter(grid["fill"].values()))
    cold, warm = grid["load_to_drawn"]["cold"], grid["load_to_drawn"]["warm"]
    opened, switch = document["open_to_drawn_3k"], document["head_switch_8k"]
    timing = layouts["timing"]
    return (f"A random 32 × 32-head Llama over three 3,000-token documents: the matrix fills {fill[0]:.0%} × "
            f"{fill[1]:.0%} of a 1400 × 900 window and is drawn {cold['min_ms'] / 1000:.1f} / "
            f"{cold['median_ms'] / 1000:.1f} / {cold['max_ms'] / 1000:.1f} s cold, {warm['min_ms'] / 1000:.1f} / "
            f"{warm['median_ms'] / 1000:.1f} / {warm['max_ms'] / 1000:.1f} s on reload (min / median / max of "
            f"{len(cold['runs_ms'])}; goal cold {verdict(MATRIX_1024, results)}, on reload "
            f"{verdict(MATRIX_1024_WARM, results)}); a {opened['tokens']:,}-token document's whole map is drawn "
            f"{opened['min']:.2f} / {opened['median']:.2f} / {opened['max']:.2f} s after opening, a head switch "
            f"at {switch['tokens']:,} tokens {switch['min']:.2f} / {switch['median']:.2f} / {switch['max']:.2f} s, "
            f"click to drawn ({source(results, 'matrix_grid', 'document_view')}). All 1,024 "
            f"heads' layouts: {minutes(timing['wall_s'])} wall, {minutes(timing['cpu_s'])} of CPU "
            f"({source(results, 'thousand_heads')}); `stats`, `related` and `report` took "
            f"{minutes(commands['stats']['seconds'])}, {minutes(commands['related']['seconds'])} and "
            f"{minutes(commands['report']['seconds'])} (`bench/results/modern_scale.json`, from its run's log).\n")


@figure("index-summary")
def index_summary(results: Results) -> str:
    models = results("faithful_sample")["models"]
    means = {model: models[model]["mean"] for model in models}
    recall = ", ".join(f"{means[m]['attn-tsne']['recall']:.3f} ({m}; t-SNE {means[m]['tsne']['recall']:.3f})"
                       for m in means)
    grid = results("matrix_grid")["load_to_drawn"]
    return (f"- Partner recall@10 of the default layout, attn-tsne, on {len(next(iter(models.values()))['heads'])} "
            f"random heads per model over a held-out text: {recall} "
            f"([methods](methods.md#attention-faithful-layouts); {source(results, 'faithful_sample')}).\n"
            f"- A 1,024-head matrix is drawn {grid['cold']['median_ms'] / 1000:.1f} s after navigation cold, "
            f"{grid['warm']['median_ms'] / 1000:.1f} s on reload (median of {len(grid['cold']['runs_ms'])}; "
            f"[scale](scale.md#modern-models-at-their-real-size); {source(results, 'matrix_grid')}).\n")


@figure("modern-table")
def modern_table(results: Results) -> str:
    grid, document, long = results("matrix_grid"), results("document_view"), results("long_inputs")
    layouts, commands = results("thousand_heads"), results("modern_scale")["commands"]
    cold, warm = grid["load_to_drawn"]["cold"], grid["load_to_drawn"]["warm"]
    opened, switch, server = document["open_to_drawn_3k"], document["head_switch_8k"], document["server_compute_8k"]
    fill = next(iter(grid["fill"].values()))
    beyond = ", ".join(f"{row['beyond_weights_gb']:.2f} GB ({row['dtype']})" for row in long["results"])
    quality = layouts["quality"]["rows"]
    ratios = [row["default_recall"] / row["full_recall"] for row in quality]
    mean_ratio = sum(row["default_recall"] for row in quality) / sum(row["full_recall"] for row in quality)
    timing = layouts["timing"]

    def command(name: str) -> str:
        return f"{minutes(commands[name]['seconds'])}, {commands[name]['peak_gb']:.2f} GB"
    rows = [
        ("matrix fills a 1400 × 900 window", f"{fill[0]:.0%} × {fill[1]:.0%}",
         f"width {verdict(MATRIX_FILL[0], results)}; height {verdict(MATRIX_FILL[1], results)}"),
        ("1,024-head matrix, navigation to drawn, min / median / max of "
         f"{len(cold['runs_ms'])}", f"cold {cold['min_ms'] / 1000:.1f} / {cold['median_ms'] / 1000:.1f} / "
         f"{cold['max_ms'] / 1000:.1f} s; reload {warm['min_ms'] / 1000:.1f} / {warm['median_ms'] / 1000:.1f} / "
         f"{warm['max_ms'] / 1000:.1f} s", f"cold {verdict(MATRIX_1024, results)}; reload "
         f"{verdict(MATRIX_1024_WARM, results)}"),
        (f"document view, {opened['tokens']:,}-token map drawn after the click",
         f"{opened['min']:.2f} / {opened['median']:.2f} / {opened['max']:.2f} s", verdict(DOCUMENT_OPEN, results)),
        (f"document view, head switch at {switch['tokens']:,} tokens, click to drawn",
         f"{switch['min']:.2f} / {switch['median']:.2f} / {switch['max']:.2f} s (server {server['min']:.2f} / "
         f"{server['median']:.2f} / {server['max']:.2f} s)", verdict(DOCUMENT_SWITCH, results)),
        ("extracting one 8,192-token document, memory beyond the weights", beyond,
         "; ".join(f"{row['dtype']} {verdict(beyond_weights(row['dtype']), results)}" for row in long["results"])),
        ("every head's default layouts, `--jobs 2`", f"{minutes(timing['wall_s'])} wall, "
         f"{minutes(timing['cpu_s'])} of CPU", verdict(LAYOUTS_1024, results)),
        (f"partner recall, {len(quality)} seeded random heads, default over a full fit",
         f"{mean_ratio:.3f}× (lowest head {min(ratios):.2f}×)",
         f"mean {verdict(RECALL_RATIO_MEAN, results)}; every head {verdict(RECALL_RATIO_EVERY_HEAD, results)}"),
        ("`qkviz stats --jobs 2`, 1,024 heads", command("stats"), verdict(STATS_1024, results)),
        ("`qkviz related`", command("related"), ""),
        ("`qkviz index`", command("index"), ""),
        ("`qkviz report`", command("report"), ""),
        ("extract; `project --method pca`", f"{command('extract')}; {command('project_pca')}", ""),
    ]
    table = "\n".join(f"| {name} | {value} | {goal} |" for name, value, goal in rows)
    return (f"| | measured | goal |\n|---|---|---|\n{table}\n\n"
            f"From {source(results, 'matrix_grid', 'document_view', 'long_inputs', 'thousand_heads')}; the commands' "
            f"rows from `bench/results/modern_scale.json`, read from its run's log (its 'source' says how), and the "
            f"report pages' timings are there as the bench printed them.\n")
