"""The docs pages' figure blocks (families, models' exactness, methods' chosen heads, the correlation report),
rendered from ``bench/results/*.json``; registered with :func:`bench.figures.results.figure` when imported."""

from __future__ import annotations

from bench.figures.goals import Goal, verdict
from bench.figures.results import BUNDLED, Results, figure, model_name, source, span


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


def _sweep_release(result: dict, newest: bool) -> dict:
    """The pinned (first) or the newest (last) release of ``bench.family_sweep``'s result."""
    releases = result["releases"]
    return releases[-1] if newest else releases[0]


def _exact(release: dict, part: str) -> float:
    return float(release["summary"][part].get("exact", 0))


#: the issue's goals for the families, judged on the newest transformers release the declared range allows
SWEEP_GOALS = (Goal("of the 57 model types of issue 27 exact with the newest transformers allowed", 52, "", False,
                    "family_sweep", "exact with the newest release", lambda r: _exact(_sweep_release(r, True),
                                                                                        "issue_27"), digits=0),
               Goal("of the held-out batch of 32 exact with the newest transformers allowed", 24, "", False,
                    "family_sweep", "exact with the newest release", lambda r: _exact(_sweep_release(r, True),
                                                                                        "held_out"), digits=0))


@figure("family-sweep")
def family_sweep(results: Results) -> str:
    """docs/families.md: every registered text model type through qkviz, on the pinned and the newest release."""
    result = results("family_sweep")

    def outcome(release: dict) -> str:
        counts = release["summary"]["all"]
        failures = release["summary"]["failures"]
        return (f"transformers {release['transformers']}: {counts['tried']} types, {counts.get('exact', 0)} exact, "
                f"{counts.get('refused', 0)} refused in one line, {counts.get('config cannot be built', 0)} whose tiny "
                f"configuration cannot be built; " + (f"**failures: {', '.join(failures)}**" if failures
                                                       else "no traceback, time-out or wrong result"))

    pinned, newest = _sweep_release(result, False), _sweep_release(result, True)
    issue, held = SWEEP_GOALS
    exact = [row for row in pinned["rows"] + newest["rows"] if row["status"] == "exact"]
    worst = max(exact, key=lambda row: row["max_error"])
    typical = sorted(row["max_error"] for row in exact)[len(exact) // 2]
    return (f"Measured by `python -m bench.family_sweep`: {outcome(pinned)}; {outcome(newest)}. The 57 types of "
            f"issue 27: {_exact(pinned, 'issue_27'):.0f} exact with {pinned['transformers']}, "
            f"{_exact(newest, 'issue_27'):.0f} with {newest['transformers']} (goal {verdict(issue, results)}). The "
            f"held-out batch of 32: {_exact(pinned, 'held_out'):.0f} exact with {pinned['transformers']}, "
            f"{_exact(newest, 'held_out'):.0f} with {newest['transformers']} (goal {verdict(held, results)}). "
            f"Largest difference from the model's own attention over every exact run: {worst['max_error']:.1e} "
            f"({worst['model_type']}), median {typical:.1e}. ({source(results, 'family_sweep')}.)\n")


@figure("gate-cost")
def gate_cost(results: Results) -> str:
    """benchmarks.md's overhead: the exactness gate's seconds against a whole extraction's, and its error."""
    result = results("gate_error")
    cost = result["cost"]
    gate_runs, extract_runs = cost[0]["gate_seconds"]["runs"], cost[0]["extract_seconds"]["runs"]

    def seconds(values: dict, digits: int) -> str:
        return span(values, digits) if values["runs"] > 1 else f"{values['median']:.{digits}f} s"

    rows = "\n".join(f"| {model_name(row['model'])} | {row['tokens']:,} | {seconds(row['gate_seconds'], 2)} | "
                     f"{seconds(row['extract_seconds'], 1)} | {row['gate_share_of_extract']:.2%} |" for row in cost)
    extract_head = (f"min / median / max of {extract_runs}" if extract_runs > 1 else "one run")
    every = result["families"] + result["windowed"] + result["bundled"]
    worst = max(every, key=lambda row: row["float32"])
    lifted = max(max(row["float16 on float32 weights"], row["bfloat16 on float32 weights"]) for row in every)
    own = "; ".join(f"{model_name(row['model'])} {row['float16']:.1e} in float16, {row['bfloat16']:.1e} in bfloat16"
                    for row in result["bundled"])
    return (f"| model | tokens extracted | the gate, min / median / max of {gate_runs} | the whole `qkviz.extract`, "
            f"{extract_head} | gate / extract (medians) |\n|---|---|---|---|---|\n{rows}\n\n"
            f"The gate's largest error over {len(result['families'])} exact families' tiny models, "
            f"{len(result['windowed'])} windowed ones on their long input, MiniLM, SmolLM2 and a random 32-layer "
            f"Llama: {worst['float32']:.1e} in float32 ({worst.get('model') or worst['model_type']}), {lifted:.1e} for "
            f"half-precision models on float32 weights; compared in their own half precision instead: {own}. A term "
            f"left out (gpt-oss's sink logits): {result['missing_term']['float32']:.2f}. `python -m bench.gate_error` "
            f"({source(results, 'gate_error')}).\n")


#: docs/models.md's exactness rows: the families each row groups, as the tables name them
EXACTNESS_GROUPS = ((("bert", "BERT"), ("roberta", "RoBERTa"), ("distilbert", "DistilBERT")),
                    (("gpt2", "GPT-2"), ("llama", "Llama"), ("qwen2", "Qwen2")),
                    (("mistral", "Mistral (window 6)"), ("gemma3", "Gemma 3 (window 5)")),
                    (("vit", "ViT"), ("deit", "DeiT"), ("dinov2", "DINOv2"), ("dinov2-registers", "DINOv2 with registers")),
                    (("clip-vision", "CLIP vision"), ("siglip-vision", "SigLIP vision"), ("clip", "whole CLIP")))


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
    return [Goal("partner recall@10 on every head", 0.30, "", False, name, "lowest head",
                 lambda found: over_heads(found, lambda ours, tsne: ours["recall"]), 3),
            Goal("partner recall against t-SNE's on every head", 3, "×", False, name, "lowest head",
                 lambda found: over_heads(found, lambda ours, tsne: ours["recall"] / max(tsne["recall"], 1e-9)), 1),
            Goal("trustworthiness on every head", 0.90, "", False, name, "lowest head",
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
                rows.append(f"| {BUNDLED[model]} {label} ({heads} heads) | {mean(measured, 'recall'):.3f} | "
                            f"{mean(measured, 'trust'):.3f} | {mean(measured, 'seconds'):.1f} |")
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
            near = f"{mean(sinks, 'sink_near'):.2f}" if sinks else "no sink head"
            rows.append(f"| {BUNDLED[model]} {label} ({len(measured)} heads) | {mean(measured, 'recall'):.3f} | "
                        f"{mean(measured, 'recall_beyond_first'):.3f} | {mean(measured, 'trust'):.3f} | {near} |")
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


#: ``qkviz report`` at 72 heads, every space, wall time in a child process (issue 17)
REPORT_TIME = Goal("`qkviz report` at 72 heads", 60, "s", True, "report", "wall time, median",
                   lambda found: found["report_s"]["median"], 1)


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
            f"{verdict(REPORT_TIME, results)}), the report process's own peak RSS {result['peak_mb']:,} MB. Per head, "
            f"the three head spaces with query Spearman take {per_head['qkviz']:.2f} s; the straightforward implementation (per sentence "
            f"`Q K^T` and `cdist`, then scipy's `pearsonr` / `spearmanr`) takes {per_head['straightforward']:.2f} s "
            f"for the original space alone ({ratio:.1f}× qkviz's time, for a third of the work) and gives the same "
            f"figures to 1e-6 (the bench asserts it). `bench/report.py --repeats {result['arguments']['repeats']} "
            f"--methods {methods}` ({source(results, 'report')}).\n")
