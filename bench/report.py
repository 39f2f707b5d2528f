"""Correlation report benchmark: ``qkviz report`` on every MiniLM head, every space.

    python -m bench.report [--run runs/minilm] [--tokens 5000] [--repeats 3] [--methods pca,umap,tsne]

Makes the run when it is missing (MiniLM over the bundled corpus, ``--tokens`` tokens), gives it the layouts
the figure was measured with (``qkviz project --method pca,umap,tsne``: PCA and UMAP in 2D and 3D, t-SNE in 2D;
named, not left to the defaults, which have changed since; ``--methods pca`` gives it PCA's only, for a report
of fewer spaces in minutes instead of most of an hour of t-SNE and UMAP on 2 cores), then times ``qkviz -q report`` end to end in a child
process, ``--repeats`` times (wall time and that process's own peak memory, its ``VmHWM``: not the largest of every
child so far, which would be the projection's; goal: 72 heads, all spaces, within 60 s on 2 cores).
For scale it also times, on a few heads and the original space
only, the straightforward implementation: per sentence, ``Q_s K_s^T`` and ``cdist``, the masked
pairs concatenated, then ``scipy.stats.pearsonr`` and ``spearmanr``; and checks both give the same
figures. ``--json`` (default ``bench/results/report.json``) records the figures with the date, machine, load
averages and arguments, and each space's mean correlations over the heads (what the report's ``summary.json`` says).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

from qkviz import open_run  # noqa: E402
from qkviz.core import allowed_pairs  # noqa: E402
from qkviz.analysis import attending_pairs, head_correlation_rows  # noqa: E402
from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, source  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]


def ensure_run(path: Path, tokens: int, methods: str) -> None:
    if not (path / "manifest.json").exists():
        subprocess.run([*QKVIZ, "extract", "--model", "minilm", "--out", str(path), "--max-tokens", str(tokens)],
                       check=True)
    subprocess.run([*QKVIZ, "-q", "project", "--run", str(path), "--method", methods, "--jobs", "2"], check=True)


def time_report(run: Path, out: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one ``qkviz report`` child process (its own peak)."""
    child = run_measured([*QKVIZ, "-q", "report", "--run", str(run), "--out", str(out), "--overwrite"])
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz report failed with exit status {child['returncode']}")
    return child["seconds"], child["peak_mb"]


def straightforward(run, layer: int, head: int) -> tuple[float, float]:
    """Pearson and Spearman of the original space, sentence by sentence, then scipy."""
    from scipy.spatial.distance import cdist
    from scipy.stats import pearsonr, spearmanr

    queries, keys = run.queries(layer, head), run.keys(layer, head)
    distances, dots = [], []
    for sentence in range(run.n_sentences):
        rows = run.sentence_tokens(sentence)
        q, k = queries[rows].astype(np.float64), keys[rows].astype(np.float64)
        allowed = allowed_pairs(len(q), run.logit_rule(layer, head))
        distances.append(cdist(q, k)[allowed])
        dots.append((q @ k.T)[allowed])
    distances, dots = np.concatenate(distances), np.concatenate(dots)
    return pearsonr(distances, dots).statistic, spearmanr(distances, dots).statistic


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "minilm")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="pca,umap,tsne", help="the layouts the run is given before the report")
    parser.add_argument("--json", type=Path, help="default: bench/results/report.json")
    args = smoke_arguments(parser, argv, out='json', repeats=1, methods='pca')
    recorder = Recorder("report", vars(args), args.json)
    ensure_run(args.run, args.tokens, args.methods)
    run = open_run(args.run)
    spaces = None
    with tempfile.TemporaryDirectory() as scratch:
        timings = [time_report(args.run, Path(scratch) / "report") for _ in range(args.repeats)]
        import pandas as pd

        table = pd.read_csv(Path(scratch) / "report" / "correlation.csv")
        spaces = sorted(set(table.space))
    seconds = sorted(t for t, _ in timings)
    print(f"qkviz report: {run.n_layers * run.n_heads} heads, {run.n_tokens} tokens, spaces {', '.join(spaces)}")
    print(f"  wall {seconds[len(seconds) // 2]:.1f} s median of {len(seconds)} (min {seconds[0]:.1f}, "
          f"max {seconds[-1]:.1f}); peak RSS {max(m for _, m in timings):.0f} MB")

    # three heads across MiniLM's grid (the first, a middle and the last), on any other run the same corners of its own
    heads = sorted({(0, 0), (min(2, run.n_layers - 1), min(5, run.n_heads - 1)),
                    (min(5, run.n_layers - 1), min(11, run.n_heads - 1))})
    pairs = attending_pairs(run, 0)
    ours = plain = 0.0
    for layer, head in heads:
        start = time.perf_counter()
        rows, _ = head_correlation_rows(run, layer, head, pairs)
        ours += time.perf_counter() - start
        start = time.perf_counter()
        pearson, spearman = straightforward(run, layer, head)
        plain += time.perf_counter() - start
        original = next(row for row in rows if row["space"] == "original")
        assert abs(original["pearson"] - pearson) < 1e-6 and abs(original["spearman"] - spearman) < 1e-6
    print(f"per head, {len(heads)} heads: qkviz all three head spaces + query Spearman {ours / len(heads):.3f} s; "
          f"straightforward loop, original space only {plain / len(heads):.3f} s "
          f"(x{plain / ours:.1f}); same Pearson and Spearman to 1e-6")
    print(recorder.write(heads=run.n_layers * run.n_heads, tokens=run.n_tokens, spaces=spaces,
                         report_s=summary([t for t, _ in timings], 1), peak_mb=round(max(m for _, m in timings)),
                         per_head_s={"qkviz": round(ours / len(heads), 3), "straightforward": round(plain / len(heads), 3)},
                         correlation=space_means(table)))


def space_means(table) -> dict[str, dict]:
    """Per space, the mean over heads of each correlation and partner recall the report writes, the most negative
    head's Pearson and the share of heads at Pearson <= -0.5 (near means a high dot product)."""
    means = {}
    for space, rows in table.groupby("space"):
        worst = rows.loc[rows.pearson.idxmin()]
        means[space] = {"heads": len(rows), **{column: round(float(rows[column].mean()), 4) for column in
                        ("pearson", "spearman", "query_spearman", "recall_query", "recall_key")
                        if column in rows and rows[column].notna().any()},
                        "strongest": {"layer": int(worst["layer"]), "head": int(worst["head"]),
                                      "pearson": round(float(worst.pearson), 4)},
                        "share_pearson_le_minus_half": round(float((rows.pearson <= -0.5).mean()), 4)}
    return means


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

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


if __name__ == "__main__":
    main()
