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


if __name__ == "__main__":
    main()
