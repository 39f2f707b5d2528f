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


if __name__ == "__main__":
    main()
