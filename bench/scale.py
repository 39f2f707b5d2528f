"""qkviz at 100,000 tokens on one machine: every command end to end, and what sampling costs.

    python -m bench.scale [--tokens 100000] [--dir /tmp/qkviz-scale] [--stages extract,project,stats,related,index,report]
                          [--tsne-heads 3:4,5:2] [--json bench/results/scale.json]
    python -m bench.scale --stages sample-cost [--cost-tokens 20000] [--cost-heads 3:4,0:1,5:2] [--samples 2500,5000,10000]
                          [--cost-methods attn-tsne,tsne]

Commands (``--stages``), each ``qkviz`` in a child process on the bundled MiniLM over ``data/sentences.txt``
followed by ``data/classics.txt`` (two public-domain books, see ``data/README.md``), the first ``--tokens``
tokens of it:

* ``extract`` (with ``--head-update``, as the demo), ``project`` (the default layouts: PCA for every head in
  2D and 3D and ``attn-tsne`` 2D fitted on the default sample, ``--jobs 2``), ``stats --syntax``,
  ``related``, ``index``, ``report``; ``project-pca`` (``project --method pca --jobs 2``: PCA for every head in
  2D and 3D, what the app shows without the t-SNE layouts);
* ``attn-tsne-heads``: ``project --method attn-tsne`` on each of ``--tsne-heads`` alone (one process, default
  settings), its seconds and peak a head, and the layout's partner recall@10 and trustworthiness (as below);
* each one's wall time and **peak memory**: the largest resident set of the command's whole process tree
  (its workers added up), polled every 0.2 s with psutil; goal: 4 GB for every command.

``sample-cost`` measures what fitting on a sample costs against a full fit, on ``--cost-heads`` of a run of
``--cost-tokens`` tokens (small enough for full fits): for ``attn-tsne`` and ``tsne``, each sample size and
the full fit (``sample`` 0), the seconds, partner recall@10 (of 200 sampled queries' and keys' 10 strongest
partners over the corpus, the share among their 10 nearest points of the other kind; chance is 10 / n) and
trustworthiness (k = 10, against the aligned points, on 3,000 sampled points), averaged over the heads.

``--json PATH`` (default ``bench/results/scale.json``) writes every figure with the date, machine, load averages
and arguments (``bench.harness``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent
warnings.filterwarnings("ignore")

import qkviz  # noqa: E402
from qkviz.core import Alignment, align_head  # noqa: E402
from qkviz import neighbours  # noqa: E402  (its partner_recall: the function, not the module of that name)

from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, minutes, source  # noqa: E402
from statistics import median  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz", "-q"]
CORPUS_FILES = (REPO / "data" / "sentences.txt", REPO / "data" / "classics.txt")
STAGES = ("extract", "project", "project-pca", "stats", "related", "index", "report")


def corpus(directory: Path) -> Path:
    path = directory / "corpus.txt"
    path.write_text("".join(file.read_text(encoding="utf-8") for file in CORPUS_FILES), encoding="utf-8")
    return path


def measured(command: list[str]) -> dict:
    """Run ``command``; its wall seconds and the peak of its process tree's summed resident memory."""
    import psutil

    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parent, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            tree = [parent, *parent.children(recursive=True)]
            peak = max(peak, sum(member.memory_info().rss for member in tree if member.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.2)
    seconds = time.perf_counter() - started
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}): {process.stderr.read()[-2000:]}")
    return {"seconds": round(seconds, 1), "peak_gb": round(peak / 2 ** 30, 2)}


def commands(run: Path, corpus_path: Path, tokens: int, report: Path) -> dict[str, list[str]]:
    return {
        "extract": [*QKVIZ, "extract", "--model", "minilm", "--corpus", str(corpus_path), "--out", str(run),
                    "--max-tokens", str(tokens), "--head-update", "--overwrite"],
        "project": [*QKVIZ, "project", "--run", str(run), "--jobs", "2"],
        "project-pca": [*QKVIZ, "project", "--run", str(run), "--method", "pca", "--jobs", "2"],
        "stats": [*QKVIZ, "stats", "--run", str(run), "--syntax"],
        "related": [*QKVIZ, "related", "--run", str(run)],
        "index": [*QKVIZ, "index", "--run", str(run)],
        "report": [*QKVIZ, "report", "--run", str(run), "--out", str(report), "--overwrite"],
    }


def end_to_end(directory: Path, tokens: int, stages: list[str]) -> dict:
    run = directory / f"minilm-{tokens}"
    planned = commands(run, corpus(directory), tokens, directory / "report")
    figures = {}
    for stage in stages:
        if stage == "extract" and run.exists():
            shutil.rmtree(run)      # extract reuses a complete run of the same inputs: time a real extraction
        figures[stage] = measured(planned[stage])
        if stage == "extract":
            figures[stage]["tokens"] = qkviz.open_run(run).n_tokens
        print(f"{stage:>8}: {figures[stage]['seconds']:8.1f} s  peak {figures[stage]['peak_gb']:.2f} GB", flush=True)
    return figures


def layout_quality(run, layer: int, head: int, layout: np.ndarray, points: np.ndarray | None = None) -> dict:
    """Partner recall@10 (queries' and keys' mean) and trustworthiness (k = 10, 3,000 sampled points) of a layout."""
    from sklearn.manifold import trustworthiness

    queries, keys = run.queries(layer, head), run.keys(layer, head)
    if points is None:
        points = align_head(queries, keys, Alignment()).points
    recall = neighbours.partner_recall(queries, keys, run.logit_rule(layer, head), layout)
    sampled = np.random.default_rng(0).choice(2 * run.n_tokens, min(3000, 2 * run.n_tokens), replace=False)
    return {"recall": round(float((recall["query"] + recall["key"]) / 2), 4),
            "trust": round(float(trustworthiness(points[sampled], layout[sampled], n_neighbors=10)), 4)}


def attn_tsne_heads(directory: Path, tokens: int, heads: list[tuple[int, int]]) -> list[dict]:
    """Each head's default attn-tsne layout made alone in a child process: its seconds, peak and quality."""
    run_path = directory / f"minilm-{tokens}"
    run = qkviz.open_run(run_path)
    rows = []
    for layer, head in heads:
        row = {"layer": layer, "head": head, "tokens": run.n_tokens,
               **measured([*QKVIZ, "project", "--run", str(run_path), "--method", "attn-tsne", "--layers", str(layer),
                           "--heads", str(head)])}
        row.update(layout_quality(run, layer, head, run.projection(layer, head, "attn-tsne", 2, make=False)))
        rows.append(row)
        print(f"attn-tsne {layer}/{head}: {row['seconds']:.1f} s  peak {row['peak_gb']:.2f} GB  "
              f"recall {row['recall']:.3f}  trust {row['trust']:.3f}", flush=True)
    return rows


def sample_cost(directory: Path, tokens: int, heads: list[tuple[int, int]], samples: list[int],
                methods: list[str]) -> list[dict]:
    from sklearn.manifold import trustworthiness

    run_path = directory / f"minilm-{tokens}"
    if not (run_path / "manifest.json").exists():
        measured(commands(run_path, corpus(directory), tokens, directory / "report")["extract"])
    run = qkviz.open_run(run_path)
    trust_points = np.random.default_rng(0).choice(2 * run.n_tokens, min(3000, 2 * run.n_tokens), replace=False)
    aligned = {(layer, head): align_head(run.queries(layer, head), run.keys(layer, head), Alignment()).points
               for layer, head in heads}
    rows = []
    for method in methods:
        for sample in [*samples, 0]:
            for layer, head in heads:
                queries, keys, points = run.queries(layer, head), run.keys(layer, head), aligned[layer, head]
                started = time.perf_counter()
                qkviz.project(run, [method], [2], layers=[layer], heads=[head], params={method: {"sample": sample}},
                              progress=False)
                seconds = time.perf_counter() - started
                layout = run.projection(layer, head, method, 2, sample=sample)
                recall = neighbours.partner_recall(queries, keys, run.logit_rule(layer, head), layout)
                rows.append({"method": method, "sample": sample, "layer": layer, "head": head,
                             "seconds": round(seconds, 1), "recall": (recall["query"] + recall["key"]) / 2,
                             "trust": float(trustworthiness(points[trust_points], layout[trust_points], n_neighbors=10))})
            mean = {name: np.mean([row[name] for row in rows[-len(heads):]]) for name in ("seconds", "recall", "trust")}
            label = "full" if sample == 0 else f"{sample}"
            print(f"{method:>9} sample {label:>6}: {mean['seconds']:6.1f} s/head  recall {mean['recall']:.3f}  "
                  f"trust {mean['trust']:.3f}", flush=True)
    return rows


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/qkviz-scale"))
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--cost-tokens", type=int, default=20_000)
    parser.add_argument("--cost-heads", default="3:4,0:1,5:2")
    parser.add_argument("--samples", default="2500,5000,10000")
    parser.add_argument("--cost-methods", default="attn-tsne,tsne")
    parser.add_argument("--tsne-heads", default="3:4,5:2", help="layer:head pairs for the attn-tsne-heads stage")
    parser.add_argument("--json", type=Path, help="default: bench/results/scale.json")
    args = smoke_arguments(parser, argv, out='json', tokens=300, dir=Path(tempfile.mkdtemp(prefix='qkviz-smoke-')),
                           stages='extract,project-pca,index')
    args.dir.mkdir(parents=True, exist_ok=True)
    recorder = Recorder("scale", vars(args), args.json)
    stages = [stage.strip() for stage in args.stages.split(",") if stage.strip()]
    results: dict = {}
    if set(stages) & set(STAGES):
        results["commands"] = end_to_end(args.dir, args.tokens, [stage for stage in stages if stage in STAGES])
    if "sample-cost" in stages:
        heads = [tuple(int(part) for part in pair.split(":")) for pair in args.cost_heads.split(",")]
        results["sample_cost"] = sample_cost(args.dir, args.cost_tokens, heads,
                                             [int(size) for size in args.samples.split(",")],
                                             args.cost_methods.split(","))
    if "attn-tsne-heads" in stages:
        results["attn_tsne_heads"] = attn_tsne_heads(
            args.dir, args.tokens, [tuple(int(part) for part in pair.split(":")) for pair in args.tsne_heads.split(",")])
    print(f"wrote {recorder.write(**results)}")


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


if __name__ == "__main__":
    main()
