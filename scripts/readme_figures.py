"""Write the README's and the docs' measured figures from ``bench/results/*.json``: ``python scripts/readme_figures.py``.

Every figure block of a page sits between ``<!-- figures:NAME -->`` and ``<!-- /figures -->``; this script
rewrites each block from the bench result files its renderer reads, and every block names those files, the date
they were measured and the machine's load average then. ``--check`` rewrites nothing and exits 1 when a page
differs from what the results give (the test suite runs it, so a page cannot drift from its results).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the pages that hold figure blocks
PAGES = ("README.md", "docs/index.md", "docs/benchmarks.md", "docs/scale.md", "docs/families.md", "docs/models.md",
         "docs/methods.md")
#: a block, indented as its opening comment (inside a list item, its lines are indented as the item's)
BLOCK = re.compile(r"^(?P<indent>[ \t]*)(?P<open><!-- figures:(?P<name>[\w-]+) -->\n)(?P<body>.*?)"
                   r"(?P=indent)(?P<close><!-- /figures -->)", re.S | re.M)


class Results:
    """The bench result files under ``root``/bench/results, read once each; which ones a block read."""

    def __init__(self, root: Path):
        self.root, self.cache, self.read = root, {}, []

    def exists(self, name: str) -> bool:
        return (self.root / "bench" / "results" / f"{name}.json").exists()

    def __call__(self, name: str) -> dict:
        if name not in self.cache:
            path = self.root / "bench" / "results" / f"{name}.json"
            if not path.exists():
                raise SystemExit(f"{path.relative_to(self.root)} is missing: run the bench that writes it (bench/*.py, --help)")
            self.cache[name] = json.loads(path.read_text(encoding="utf-8"))
        if name not in self.read:
            self.read.append(name)
        return self.cache[name]


def load_average(result: dict) -> tuple[float, float] | None:
    """The lowest and highest 1-minute load average a result recorded (its files name it in several ways)."""
    found: list[float] = []

    def walk(value, key=""):
        if isinstance(value, dict):
            for name, item in value.items():
                walk(item, name)
        elif isinstance(value, list) and "load" in key and value and all(isinstance(v, (int, float)) for v in value):
            # os.getloadavg()'s three: the 1-minute one; a series sampled during the run: all of it
            found.extend(value if key in ("load_during", "load_observed") or len(value) != 3 else value[:1])
        elif isinstance(value, list):
            for item in value:
                walk(item, key)
    walk(result)
    return (min(found), max(found)) if found else None


def source(results: Results, *names: str) -> str:
    """``bench/results/a.json`` (date, load L on N cores) for each result file a block read."""
    parts = []
    for name in names:
        result = results(name)
        date = str(result.get("date") or next((v.get("date") for v in result.values()
                                                 if isinstance(v, dict) and v.get("date")), "undated"))[:10]
        cpus = (result.get("machine") or {}).get("cpus")
        load = load_average(result)
        where = f"load {load[0]:.1f}–{load[1]:.1f}" if load else "load not recorded"
        where += f" of {cpus} cores" if cpus else ""
        note = f" ({result['load_note']})" if result.get("load_note") else ""
        if load and cpus and load[1] > cpus:
            note += " (shared: slower than idle)"
        parts.append(f"`bench/results/{name}.json`, {date}, {where}{note}")
    return "; ".join(parts)


FIGURES: dict[str, Callable[[Results], str]] = {}


def figure(name: str):
    def register(render):
        FIGURES[name] = render
        return render
    return register


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.1f} s"


@figure("first-picture")
def first_picture(results: Results) -> str:
    result = results("first_picture")
    times = result["seconds_from_start"]
    labels = {"extract": "extract 5,000 tokens", "server answers": "the app answers (every head's PCA made first)",
              "matrix drawn": "matrix view drawn in Chromium",
              "all layouts": "every head's attention t-SNE layout landed (server and `qkviz project` sharing them)"}
    rows = "\n".join(f"| {labels[name]} | {minutes(seconds)} |" for name, seconds in times.items() if name in labels)
    estimate = result.get("estimate")
    said = (f" The server estimated the rest at {estimate['text']} when a tenth had landed "
            f"({estimate['logged_at_s']:.0f} s)." if estimate else "")
    return (f"| from the start (one run) | time |\n|---|---|\n{rows}\n\n"
            f"Measured by `bench/first_picture.py` (the demo's steps, real Chromium).{said} "
            f"({source(results, 'first_picture')}.)\n")


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
            f"{len(cold['runs_ms'])}; goal 3 s); a {opened['tokens']:,}-token document's whole map is drawn "
            f"{opened['min']:.2f} / {opened['median']:.2f} / {opened['max']:.2f} s after it is opened, a head switch "
            f"at {switch['tokens']:,} tokens {switch['min']:.2f} / {switch['median']:.2f} / {switch['max']:.2f} s "
            f"from the click to the drawn head ({source(results, 'matrix_grid', 'document_view')}). All 1,024 "
            f"heads' layouts: {minutes(timing['wall_s'])} wall, {minutes(timing['cpu_s'])} of CPU "
            f"({source(results, 'thousand_heads')}); `stats`, `related` and `report` took "
            f"{minutes(commands['stats']['seconds'])}, {minutes(commands['related']['seconds'])} and "
            f"{minutes(commands['report']['seconds'])} (`bench/results/modern_scale.json`, read from its run's log "
            f"as the file says).\n")


@figure("extract")
def extract(results: Results) -> str:
    names = [name for name in ("extract_minilm", "extract_smollm2") if results.exists(name)] or ["extract_minilm"]
    columns = [results(name) for name in names]
    labels = [f"{result['arguments']['model']} {result['arguments']['dtype']}" for result in columns]

    def span(value: dict, unit: str = "", digits: int = 2) -> str:
        return f"{value['min']:.{digits}f} / {value['median']:.{digits}f} / {value['max']:.{digits}f}{unit}"
    rows = [("tokens per run", [f"{r['tokens']:,}" for r in columns]),
            ("bare forward pass", [span(r["bare_forward_s"], " s") for r in columns]),
            ("`qkviz.extract`, all included", [span(r["extract_s"], " s") for r in columns]),
            ("a warm load of the model", [span(r["warm_model_load_s"], " s") for r in columns]),
            ("ratio extract / bare forward", [span(r["ratio"]) for r in columns]),
            ("ratio less the pair's warm model load", [span(r["ratio_without_model_load"]) for r in columns]),
            ("a run in a child process: tokens, wall, its peak RSS, run size",
             [f"{c['tokens']:,}, {c['seconds']:.1f} s, {c['peak_mb']:,} MB, {c['run_mb']:,} MB"
              if (c := r.get("child_extract")) else "not run" for r in columns])]
    table = "\n".join(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows)
    return (f"| min / median / max of {columns[0]['ratio']['runs']} pairs | " + " | ".join(labels) + " |\n|---|"
            + "---|" * len(columns) + f"\n{table}\n\n({source(results, *names)}.)\n")


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
        ("matrix fills a 1400 × 900 window", f"{fill[0]:.0%} × {fill[1]:.0%}", "≥ 60 % × 55 %"),
        ("1,024-head matrix, navigation to drawn, min / median / max of "
         f"{len(cold['runs_ms'])}", f"cold {cold['min_ms'] / 1000:.1f} / {cold['median_ms'] / 1000:.1f} / "
         f"{cold['max_ms'] / 1000:.1f} s; reload {warm['min_ms'] / 1000:.1f} / {warm['median_ms'] / 1000:.1f} / "
         f"{warm['max_ms'] / 1000:.1f} s", "≤ 3 s"),
        (f"document view, {opened['tokens']:,}-token map drawn after the click",
         f"{opened['min']:.2f} / {opened['median']:.2f} / {opened['max']:.2f} s", f"≤ {opened['goal_s']:.0f} s"),
        (f"document view, head switch at {switch['tokens']:,} tokens, click to drawn",
         f"{switch['min']:.2f} / {switch['median']:.2f} / {switch['max']:.2f} s (server {server['min']:.2f} / "
         f"{server['median']:.2f} / {server['max']:.2f} s)", f"≤ {switch['goal_s']:.0f} s"),
        ("extracting one 8,192-token document, memory beyond the weights", beyond, "≤ 2 GB"),
        ("every head's default layouts, `--jobs 2`", f"{minutes(timing['wall_s'])} wall, "
         f"{minutes(timing['cpu_s'])} of CPU", "≤ 30 min"),
        (f"partner recall, {len(quality)} seeded random heads, default over a full fit",
         f"{mean_ratio:.3f}× (lowest head {min(ratios):.2f}×)", "≥ 0.9×"),
        ("`qkviz stats --jobs 2`, 1,024 heads", command("stats"), "finishes"),
        ("`qkviz related`", command("related"), "finishes"),
        ("`qkviz index`", command("index"), "finishes"),
        ("`qkviz report`", command("report"), "finishes"),
        ("extract; `project --method pca`", f"{command('extract')}; {command('project_pca')}", ""),
    ]
    table = "\n".join(f"| {name} | {value} | {goal} |" for name, value, goal in rows)
    return (f"| | measured | goal |\n|---|---|---|\n{table}\n\n"
            f"From {source(results, 'matrix_grid', 'document_view', 'long_inputs', 'thousand_heads')}; the commands' "
            f"rows from `bench/results/modern_scale.json`, read from its run's log (its 'source' says how), and the "
            f"report pages' timings are there as the bench printed them.\n")


@figure("app")
def app(results: Results) -> str:
    result = results("app")
    runs = result["runs"]

    def span(value) -> str:
        return (f"{value['min']:,.0f} / {value['median']:,.0f} / {value['max']:,.0f} ms" if isinstance(value, dict)
                else "not measured" if value is None else f"{value:,.0f} ms")
    rows = [("matrix view, navigation to drawn: cold (one)", "matrix cold ms"),
            ("matrix view, navigation to drawn: warm", "matrix warm ms"),
            ("matrix coloured by an atlas statistic", "matrix coloured ms"), ("Positions view", "positions ms"),
            ("head switch, click to the new head drawn", "head switch ms"),
            ("search across all heads, Enter to the matches drawn", "search Enter to drawn ms"),
            ("… of which the server's callback", "search server ms")]
    rows = [(label, key) for label, key in rows if any(key in run for run in runs)]
    header = "| min / median / max | " + " | ".join(f"{run['run']} ({run['heads']} heads, {run['points per head']:,} "
                                                       f"points a head)" for run in runs) + " |"
    table = "\n".join(f"| {label} | " + " | ".join(span(run.get(key)) for run in runs) + " |" for label, key in rows)
    sizes = "; ".join(f"{run['run']}: a head switch sends {run['single figure MB']:.2f} MB, the matrix "
                      f"{run['matrix figure MB']:.2f} MB, the server peaks at {run['rss peak MB']:,.0f} MB" for run in runs)
    floor = result["floor_ms"]
    return (f"{header}\n|---|" + "---|" * len(runs) + f"\n{table}\n\n{sizes}. An empty Dash page with one "
            f"10,000-point WebGL graph (the floor) is drawn {span(floor)} after navigation. "
            f"`bench/app.py --repeats {result['arguments']['repeats']}` ({source(results, 'app')}).\n")


@figure("families")
def families(results: Results) -> str:
    result = results("families")
    exact = [row for row in result["families"] if row["status"] == "exact"]
    worst = max(exact, key=lambda row: row["max_error"])
    agrees = "as the table says" if result["agrees_with_table"] else "**not** as the table says"
    gates = "; ".join(f"{gate['model']} {gate['seconds']['min']:.2f} / {gate['seconds']['median']:.2f} / "
                      f"{gate['seconds']['max']:.2f} s (error {gate['max_error']:.1e})" for gate in result["gate"])
    return (f"Measured by `bench/families.py`: {result['measured']['exact']} model types exact and "
            f"{result['measured']['refused']} refused, {agrees}; the largest error over every exact type's layers, "
            f"heads and pairs is {worst['max_error']:.1e} ({worst['model_type']}). The gate on the bundled models, "
            f"min / median / max of {result['gate'][0]['seconds']['runs']}: {gates}. ({source(results, 'families')}.)\n")


#: docs/models.md's exactness rows: the families each row groups, as the tables name them
EXACTNESS_GROUPS = ((("bert", "BERT"), ("roberta", "RoBERTa"), ("distilbert", "DistilBERT")),
                    (("gpt2", "GPT-2"), ("llama", "Llama"), ("qwen2", "Qwen2")),
                    (("mistral", "Mistral (window 6)"), ("gemma3", "Gemma 3 (window 5)")),
                    (("vit", "ViT"), ("deit", "DeiT"), ("dinov2", "DINOv2"), ("dinov2-registers", "DINOv2 with registers")),
                    (("clip-vision", "CLIP vision"), ("siglip-vision", "SigLIP vision"), ("clip", "whole CLIP")))
BUNDLED = {"minilm": "MiniLM", "smollm2": "SmolLM2"}


@figure("exactness")
def exactness(results: Results) -> str:
    result = results("exactness")
    by = {row["model"]: row for row in result["rows"]}
    grouped = {model for group in EXACTNESS_GROUPS for model, _ in group}
    groups = [[(model, label) for model, label in group if model in by] for group in EXACTNESS_GROUPS]
    groups += [[(model, model)] for model in by if model not in grouped and model not in BUNDLED]
    rows = [("tiny " + " / ".join(label for _, label in group),
             *(" / ".join(f"{by[model][dtype]:.1e}" for model, _ in group) for dtype in ("float32", "float16")))
            for group in groups if group]
    rows += [(f"{BUNDLED[model]}, whole default corpus ({by[model]['tokens']:,} tokens)",
              f"{by[model]['float32']:.1e}", f"{by[model]['float16']:.1e}") for model in BUNDLED if model in by]
    table = "\n".join(f"| {name} | {f32} | {f16} |" for name, f32, f16 in rows)
    compared = {row["kind"]: row["compared"] for row in result["rows"]}
    worst = {dtype: max(result["rows"], key=lambda row: row[dtype]) for dtype in ("float32", "float16")}
    return (f"| model | float32 storage | float16 storage |\n|---|---|---|\n{table}\n\n"
            f"Compared: tiny text models on {compared.get('tiny text', 'no')} in one padded batch, tiny image models "
            f"on {compared.get('tiny image', 'no')}, the bundled models on {compared.get('bundled', 'no')} spread over "
            f"the corpus. Largest: {worst['float32']['float32']:.1e} ({worst['float32']['model']}) in float32, "
            f"{worst['float16']['float16']:.1e} ({worst['float16']['model']}) in float16. `bench/exactness.py` "
            f"({source(results, 'exactness')}).\n")


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


def mean(rows: list[dict], key: str) -> float:
    return sum(row[key] for row in rows) / len(rows)


def attn_goals(model: str, result: dict) -> str:
    """attn-tsne against the goals, head by head (what ``bench/faithful.py`` prints as its goals)."""
    ours = {(r["layer"], r["head"]): r for r in method_rows(result, "attn-tsne")}
    tsne = {(r["layer"], r["head"]): r for r in method_rows(result, "tsne")}
    heads = [head for head in ours if head in tsne]
    if not heads:
        return ""
    low = min(heads, key=lambda head: ours[head]["recall"])
    ratios = {head: ours[head]["recall"] / max(tsne[head]["recall"], 1e-9) for head in heads}
    return (f"{BUNDLED[model]}: recall ≥ 0.30 on {sum(ours[h]['recall'] >= 0.30 for h in heads)} of {len(heads)} heads "
            f"(lowest {ours[low]['recall']:.3f}, L{low[0]} H{low[1]}), ≥ 3× t-SNE on "
            f"{sum(r >= 3 for r in ratios.values())} (lowest {min(ratios.values()):.1f}×), trustworthiness ≥ 0.90 on "
            f"{sum(ours[h]['trust'] >= 0.90 for h in heads)} (lowest {min(ours[h]['trust'] for h in heads):.3f}), "
            f"no slower than t-SNE on {sum(ours[h]['seconds'] <= tsne[h]['seconds'] for h in heads)}")


@figure("faithful-chosen")
def faithful_chosen(results: Results) -> str:
    chosen = chosen_results(results)
    rows = []
    for model, result in chosen.items():
        for method, label in CHOSEN_METHODS.items():
            measured = method_rows(result, method)
            if measured:
                heads = len({(r["layer"], r["head"]) for r in measured})
                rows.append(f"| {BUNDLED[model]} {label} ({heads} heads) | {mean(measured, 'recall'):.3f} | "
                            f"{mean(measured, 'trust'):.3f} | {mean(measured, 'seconds'):.1f} |")
    absent = [f"{BUNDLED[model]}: " + ", ".join(label.strip("*") for method, label in CHOSEN_METHODS.items()
                                                 if not method_rows(result, method))
              for model, result in chosen.items()]
    absent = [text for text in absent if not text.endswith(": ")]
    goals = "; ".join(text for text in (attn_goals(model, result) for model, result in chosen.items()) if text)
    return ("| mean over the chosen heads | recall@10 | trustworthiness | s / head |\n|---|---|---|---|\n"
            + "\n".join(rows) + "\n\n"
            + (f"Not measured in these files: {'; '.join(absent)}. " if absent else "")
            + (f"attn-tsne against the goals, head by head: {goals}. " if goals else "")
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
            near = f"{mean(sinks, 'sink_near'):.2f}" if sinks else "no sink head"
            rows.append(f"| {BUNDLED[model]} {label} ({len(measured)} heads) | {mean(measured, 'recall'):.3f} | "
                        f"{mean(measured, 'recall_beyond_first'):.3f} | {mean(measured, 'trust'):.3f} | {near} |")
    lacking = [BUNDLED[model] for model, name in names.items()
               if not method_rows(results(name), "attn-tsne-hide1")]
    return ("| mean over the chosen heads | recall@10 | beyond-first | trustworthiness | sink-near (sink heads) |\n"
            "|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
            + (f"`--hide-first-token` not measured on {' and '.join(lacking)}. " if lacking else "")
            + f"`bench/faithful.py --model` ({source(results, *names.values())}).\n")


@figure("report")
def report(results: Results) -> str:
    result = results("report")
    seconds, per_head = result["report_s"], result["per_head_s"]
    ratio = per_head["straightforward"] / per_head["qkviz"]
    methods = result["arguments"].get("methods", "pca,umap,tsne")
    return (f"`qkviz report` end to end in a child process, {result['heads']} heads, {result['tokens']:,} tokens, "
            f"the run given `--method {methods}` layouts, "
            f"{len(result['spaces'])} spaces ({', '.join(result['spaces'])}): {seconds['min']:.1f} / "
            f"**{seconds['median']:.1f}** / {seconds['max']:.1f} s (min / median / max of {seconds['runs']}; goal "
            f"≤ 60 s), the report process's own peak RSS {result['peak_mb']:,} MB. Per head, the three head spaces "
            f"with query Spearman take {per_head['qkviz']:.2f} s; the straightforward implementation (per sentence "
            f"`Q K^T` and `cdist`, then scipy's `pearsonr` / `spearmanr`) takes {per_head['straightforward']:.2f} s "
            f"for the original space alone ({ratio:.1f}× qkviz's time, for a third of the work) and gives the same "
            f"figures to 1e-6 (the bench asserts it). `bench/report.py --repeats {result['arguments']['repeats']} "
            f"--methods {methods}` ({source(results, 'report')}).\n")


def render(text: str, results: Results, page: str) -> str:
    def replace(match: re.Match) -> str:
        name = match["name"]
        if name not in FIGURES:
            raise SystemExit(f"{page}: unknown figure block '{name}' (known: {', '.join(sorted(FIGURES))})")
        body = "".join(match["indent"] + line if line.strip() else line
                       for line in FIGURES[name](results).splitlines(keepends=True))
        return match["indent"] + match["open"] + body + match["indent"] + match["close"]
    return BLOCK.sub(replace, text)


def stale_pages(root: Path, write: bool) -> list[str]:
    """The pages whose figure blocks differ from the results (rewritten when ``write``)."""
    results, stale = Results(root), []
    for page in PAGES:
        path = root / page
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        wanted = render(text, results, page)
        if wanted != text:
            stale.append(page)
            if write:
                path.write_text(wanted, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a page is out of date")
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    stale = stale_pages(args.root, write=not args.check)
    if args.check and stale:
        print(f"out of date with bench/results: {', '.join(stale)}; run python scripts/readme_figures.py",
              file=sys.stderr)
        return 1
    for page in stale:
        print(f"rewrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
