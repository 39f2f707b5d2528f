"""The scale bench's figure blocks (``bench/scale.py`` measures): every stage at 100,000 tokens, the paper-scale
estimate and the sampled layouts' cost, each goal with its verdict (``docs/scale.md``).
"""

from __future__ import annotations

from statistics import median

from bench.figures.goals import Goal, verdict
from bench.figures.results import Results, figure, minutes, source

# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: every command's peak memory goal (docs/scale.md), in GB
MEMORY_GOAL_GB = 4.0

def memory_goal(names: list[str]) -> Goal:
    """Every command within 4 GB: the largest peak over the commands the files ``names`` measured."""
    def read(found: dict) -> float | None:
        peaks = [figures["peak_gb"] for result in found.values()
                 for figures in [*(result.get("commands") or {}).values(), *result.get("attn_tsne_heads", [])]
                 if "peak_gb" in figures]
        return max(peaks) if peaks else None
    return Goal("every command's peak memory", MEMORY_GOAL_GB, "GB", True, tuple(names),
                "the largest peak of a command", read, 2)

#: MiniLM's shape (what bench/scale.py extracts) and the float32 storage of a token's vectors
MINILM = {"layers": 6, "heads": 12, "d_head": 32}

#: the projection's default worker count in bench/scale.py's commands
JOBS = 2

SCALES_WITH = {
    "extract": "tokens × layers (one forward pass); writes {bytes_per_token} a token (72 heads × 32 dims × "
               "query and key, float32)",
    "index": "tokens (only the token index is written)",
    "related": "heads² × sampled sentences",
    "project-pca": "heads × tokens",
    "stats": "tokens (spaCy parses every sentence; attention within sentences)",
    "project": "heads × (a fit of constant size + the whole head's graph ∝ n^1.5 × `d_head` + a polish ∝ n)",
    "report": "heads × attending pairs per layer",
}

LABELS = {"extract": "`extract --head-update`", "index": "`index`", "related": "`related`",
          "project-pca": "`project --method pca --jobs 2` (PCA 2D + 3D, every head)",
          "stats": "`stats --syntax`", "project": "`project --jobs 2` (the default layouts: PCA 2D + 3D, attn-tsne 2D)",
          "report": "`report`"}

def kb(n_bytes: float) -> str:
    return f"{n_bytes / 1000:.1f} KB"

def size(n_bytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.0f} {unit}" if n_bytes / scale >= 10 else f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes:.0f} B"

def power(value: float) -> str:
    """``2.7 × 10^14``."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa} × 10^{int(exponent)}"

def duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return minutes(seconds)

def scale_results(results: Results) -> list[str]:
    """``scale`` and any ``scale_<part>`` result files there are (a stage run apart, like ``stats``)."""
    names = ["scale"] if results.exists("scale") else []
    root = results.root / "bench" / "results"
    names += sorted(path.stem for path in root.glob("scale_*.json"))
    return names

def measured_commands(results: Results) -> tuple[dict, list[str]]:
    """Every stage measured, over the result files, and the files that had one."""
    found, names = {}, []
    for name in scale_results(results):
        stages = results(name).get("commands") or {}
        if stages:
            names.append(name)
        found.update(stages)
    return found, names

def tsne_heads(results: Results) -> list[dict]:
    return results("scale").get("attn_tsne_heads", []) if results.exists("scale") else []

def not_measured(stage: str, tokens: int) -> str:
    return (f"not measured in the current result files: `python -m bench.scale --tokens {tokens} --stages "
            f"extract,{stage}` measures it")

@figure("scale-stages")
def scale_stages(results: Results) -> str:
    stages, names = measured_commands(results)
    if not stages:
        return ("Not measured in the current result files: `python -m bench.scale --stages "
                "extract,project,stats,related,index,report` measures every command.\n")
    asked = results(names[0])["arguments"]["tokens"]
    tokens = stages.get("extract", {}).get("tokens") or asked
    bytes_per_token = MINILM["layers"] * MINILM["heads"] * MINILM["d_head"] * 2 * 4
    rows = []
    for stage in ("extract", "index", "related", "project-pca", "stats"):
        figures = stages.get(stage)
        scales = SCALES_WITH[stage].format(bytes_per_token=kb(bytes_per_token))
        if figures:
            rows.append(f"| {LABELS[stage]} | {minutes(figures['seconds'])} | {figures['peak_gb']:.2f} GB | {scales} |")
        else:
            rows.append(f"| {LABELS[stage]} | {not_measured(stage, asked)} | | {scales} |")
    heads = tsne_heads(results)
    all_heads = MINILM["layers"] * MINILM["heads"]
    if heads:
        each = "; ".join(f"{row['layer']}/{row['head']} {minutes(row['seconds'])}" for row in heads)
        peak = max(row["peak_gb"] for row in heads)
        rows.append(f"| `project --method attn-tsne`, one head in a process of its own (layer/head {each}) | "
                    f"{minutes(median([row['seconds'] for row in heads]))} a head (median) | {peak:.2f} GB | "
                    f"{SCALES_WITH['project']} |")
        derived = median([row["seconds"] for row in heads]) * all_heads / JOBS
        rows.append(f"| {LABELS['project']} | derived, not measured: about {minutes(derived)} (the median head × "
                    f"{all_heads} heads / {JOBS} workers, PCA left out); `python "
                    f"bench/scale.py --stages extract,project` measures it | | {SCALES_WITH['project']} |")
    else:
        rows.append(f"| {LABELS['project']} | {not_measured('project', asked)} | | {SCALES_WITH['project']} |")
    rows.append(f"| {LABELS['report']} | {not_measured('report', asked)} | | {SCALES_WITH['report']} |")
    measured = {stage: figures for stage, figures in stages.items() if "peak_gb" in figures}
    measured.update({f"attn-tsne {row['layer']}/{row['head']}": row for row in heads})
    worst = max(measured, key=lambda stage: measured[stage]["peak_gb"])
    goal = f"Every command's peak memory: goal {verdict(memory_goal(names), results)}, `{worst}`'s"
    quality = ""
    if heads:
        quality = (" The attn-tsne heads' layouts, at today's defaults: " + "; ".join(
            f"layer/head {row['layer']}/{row['head']} partner recall {row['recall']:.3f}, trustworthiness "
            f"{row['trust']:.3f}" for row in heads) + f" (chance recall is 10 / {2 * tokens:,} points).")
    return (f"MiniLM over {tokens:,} tokens.\n\n| command | time | peak memory | what it scales with |\n|---|---|---|---|\n"
            + "\n".join(rows) + f"\n\n{goal}.{quality} `bench/scale.py` "
            f"({source(results, *names)}).\n")

#: SmolLM2-135M's parameters (its forward pass is about twice that in FLOP a token)
SMOLLM2_PARAMETERS = 134.5e6

#: the model on paper: SmolLM2's shape, float16 storage, 32 one-core workers
PAPER = {"layers": 30, "heads": 9, "kv_heads": 3, "d_head": 64, "bytes": 2, "workers": 32}

@figure("scale-paper")
def scale_paper(results: Results) -> str:
    p = PAPER
    heads = p["layers"] * p["heads"]
    token = p["layers"] * (p["heads"] + p["kv_heads"]) * p["d_head"] * p["bytes"]
    lines = [f"**Storage** (float16): a token is {heads} × {p['d_head']} × {p['bytes']} B of queries and "
             f"{p['layers'] * p['kv_heads']} × {p['d_head']} × {p['bytes']} B of keys, {kb(token)}: "
             f"{size(token * 1e6)} at 1M tokens, {size(token * 1e7)} at 10M, on storage every worker mounts "
             f"([Dask](dask.md)). Reading one head's queries and keys: {size(2e6 * p['d_head'] * p['bytes'])} at 1M "
             f"tokens, {size(2e7 * p['d_head'] * p['bytes'])} at 10M; a worker holds them in float32 with the "
             f"aligned copy and the graph, several times that."]
    flop = 2 * SMOLLM2_PARAMETERS
    lines.append(f"**Extraction.** SmolLM2's forward pass is about {flop / 1e9:.2f} GFLOP a token (twice its "
                 f"{SMOLLM2_PARAMETERS / 1e6:.0f} million parameters): 1M tokens are about {power(flop * 1e6)} FLOP, "
                 f"seconds of a current GPU's time. Extraction is then bound by writing the vectors at the storage's "
                 f"speed. A GPU's exact brute-force search of a head's graph does `4 n² d_head` = "
                 f"{power(4 * 1e7 ** 2 * p['d_head'])} multiply-adds at 10M tokens.")
    heads_rows = tsne_heads(results)
    if heads_rows:
        n0 = heads_rows[0]["tokens"]
        per_head = median([row["seconds"] for row in heads_rows])
        rows = []
        for tokens in (1_000_000, 10_000_000):
            head = per_head * (tokens / n0) ** 1.5 * p["d_head"] / MINILM["d_head"]
            rows.append(f"| {tokens // 1_000_000}M | {duration(head)} | {duration(head * heads / p['workers'])} |")
        lines.append(
            f"**Projection**, derived from one measurement, not measured at that size: attn-tsne's median head at "
            f"{n0:,} tokens took {minutes(per_head)} (above). Its parts grow differently: the sample's fit is of "
            f"constant size, the whole head's graph costs four inverted-file searches with each row scanning a "
            f"fixed number of `sqrt(n)` cells (`∝ n^1.5 × d_head`), the spread and the polish grow as `n`. "
            f"Scaling the whole head's time as its fastest-growing part, by `(n / {n0:,})^1.5 × d_head / "
            f"{MINILM['d_head']}`, gives an upper bound, with {heads} heads shared by {p['workers']} workers:\n\n"
            f"| tokens | a head, at most | all {heads} heads on {p['workers']} workers, at most |\n|---|---|---|\n"
            + "\n".join(rows))
    else:
        lines.append("**Projection**: no attn-tsne head is measured at 100,000 tokens in the current result files "
                     "(`python -m bench.scale --stages extract,attn-tsne-heads`), so nothing is derived here.")
    return "\n\n".join(lines) + (f"\n\n(Arithmetic on the format{' and on ' + source(results, 'scale') if heads_rows else ''}.)\n")

@figure("scale-sampling")
def scale_sampling(results: Results) -> str:
    result = results("scale_sample_cost")
    rows = result["sample_cost"]
    full = {(row["layer"], row["head"]): row for row in rows if row["sample"] == 0}
    sampled = [row for row in rows if row["sample"] and (row["layer"], row["head"]) in full]
    alone = {(row["layer"], row["head"]): row for row in tsne_heads(results)}
    lines = []
    for row in sampled:
        head = (row["layer"], row["head"])
        whole = full[head]
        timed = (f" ({minutes(alone[head]['seconds'])} in a process of its own, above)" if head in alone else "")
        lines.append(f"layer/head {row['layer']}/{row['head']}, {row['method']} fitted on {row['sample']:,} tokens"
                     f"{timed}: partner recall {row['recall']:.3f}, trustworthiness {row['trust']:.3f}; a full fit "
                     f"of all {result['arguments']['cost_tokens']:,} tokens: {minutes(whole['seconds'])}, recall "
                     f"{whole['recall']:.3f} ({row['recall'] / whole['recall']:.2f}× kept), trustworthiness "
                     f"{whole['trust']:.3f}")
    return ("; ".join(lines) + f". `bench/scale.py --stages sample-cost` ({source(results, 'scale_sample_cost')}).\n")
