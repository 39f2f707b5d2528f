"""Head-atlas benchmark: ``qkviz stats`` on every head, and what it finds.

    python -m bench.stats [--run runs/minilm-atlas] [--tokens 5000] [--repeats 3] [--also runs/smollm2-atlas]
                          [--out bench/results/stats.json]

Makes the MiniLM run when it is missing (the bundled corpus, ``--tokens`` tokens, with
``--head-update``), then times ``qkviz -q stats --syntax`` (every statistic: the attention
statistics, labels, exemplars, logit decomposition, head updates, parts of speech and dependency
alignment) end to end in a child process (wall time and peak memory; goal: 72 heads at 5,000
tokens within 2 minutes on 2 cores). For each run (``--also`` adds more, e.g. SmolLM2) it
prints the label counts, the share of heads labelled first-token (sink), and the mean share of
queries whose strongest key is the first token, a delimiter ([SEP] and punctuation), and the mean
attention to special tokens. Writes ``bench/results/stats.json`` (``--out``): the timings (each run's wall
seconds and peak memory; a run given by ``--also`` without an atlas is timed once when its atlas is made) and
each run's figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

from qkviz import open_run  # noqa: E402
from qkviz.analysis import load_atlas  # noqa: E402

from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, run_name, source, span  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]


def time_stats(run: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one ``qkviz stats`` child process (its own peak: its ``VmHWM``, ``bench.harness``)."""
    child = run_measured([*QKVIZ, "-q", "stats", "--run", str(run), "--syntax"])
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz stats failed with exit status {child['returncode']}")
    return child["seconds"], child["peak_mb"]


def describe(path: Path) -> dict:
    """The run's atlas figures (printed, and returned for the result file)."""
    run = open_run(path)
    atlas = load_atlas(run)
    table = atlas.table
    counts = table.label.value_counts()
    heads = len(table)
    figures = {"run": path.name, "model": run.model_id, "layers": run.n_layers, "heads": run.n_heads,
               "tokens": run.n_tokens, "labels": {label: int(count) for label, count in counts.items()}}
    print(f"{run.model_id} ({run.n_layers}x{run.n_heads} heads, {run.n_tokens} tokens): "
          + ", ".join(f"{label} {count}" for label, count in counts.items()))
    by_layer = table.groupby("layer").label.apply(lambda labels: (labels == "first-token").mean())
    figures["first_token_share"] = counts.get("first-token", 0) / heads
    figures["first_token_share_by_layer"] = [round(float(share), 4) for share in by_layer]
    print(f"  first-token (sink) heads: {counts.get('first-token', 0)}/{heads} "
          f"({counts.get('first-token', 0) / heads:.0%}); by layer: "
          + " ".join(f"{share:.0%}" for share in by_layer))
    figures.update(argmax_first=table.argmax_first.mean(), argmax_delimiter=table.argmax_delimiter.mean(),
                   special_attention=table.special_attention.mean(),
                   first_token_attention=table.first_token_attention.mean())
    print(f"  mean over heads: strongest key is the first token {table.argmax_first.mean():.1%} of queries, "
          f"a later delimiter {table.argmax_delimiter.mean():.1%}; attention to special tokens "
          f"{table.special_attention.mean():.1%}, to the first token {table.first_token_attention.mean():.1%}")
    shares = {column.removeprefix("share_"): table[column].mean() for column in table if column.startswith("share_")}
    figures["logit_shares"] = shares
    print("  logit variance shares (mean over heads): " + ", ".join(f"{k} {v:.1%}" for k, v in shares.items()))
    first = table[table.layer == 0].filter(like="embed_share_")
    if not first.empty:
        figures["first_layer_split"] = {column.removeprefix("embed_share_"): first[column].mean() for column in first}
        print("  first layer, token / position split (mean over its heads): " + ", ".join(
            f"{column.removeprefix('embed_share_')} {first[column].mean():.1%}" for column in first))
        strongest = table.loc[first["embed_share_position_position"].idxmax()]
        figures["most_positional_first_layer_head"] = {
            "layer": 0, "head": int(strongest["head"]), "label": strongest.label,
            "position_position": strongest.embed_share_position_position}
        print(f"  most positional first-layer head: L0 H{strongest['head']} ({strongest.label}), "
              f"position-position share {strongest.embed_share_position_position:.1%}")
    if "update_ratio_median" in table:
        figures["update_ratio_median"] = table.update_ratio_median.median()
        figures["update_cosine_mean"] = table.update_cosine_mean.mean()
        print(f"  head update: median |update|/|hidden| {table.update_ratio_median.median():.3f}, "
              f"mean cosine {table.update_cosine_mean.mean():+.3f}")
    if "dependency_alignment" in table:
        top = table.loc[table.dependency_alignment.idxmax()]
        figures["dependency_alignment"] = {"mean": table.dependency_alignment.mean(),
                                           "max": table.dependency_alignment.max(), "max_layer": int(top["layer"]),
                                           "max_head": int(top["head"]), "max_label": top.label}
        print(f"  dependency alignment: mean {table.dependency_alignment.mean():.3f}, "
              f"max {table.dependency_alignment.max():.3f} (L{top['layer']} H{top['head']}, {top.label})")
    return {key: (float(value) if hasattr(value, "dtype") else value) for key, value in figures.items()}


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--run', '{run}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "minilm-atlas")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--also", type=Path, action="append", default=[], help="further runs to describe")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/stats.json)")
    args = smoke_arguments(parser, argv, out='out', repeats=1, also=[])
    recorder = Recorder("stats", vars(args), out=args.out)
    if not (args.run / "manifest.json").exists():
        subprocess.run([*QKVIZ, "extract", "--model", "minilm", "--out", str(args.run), "--head-update",
                        "--max-tokens", str(args.tokens)], check=True)
    timings = [time_stats(args.run) for _ in range(args.repeats)]
    seconds = sorted(t for t, _ in timings)
    run = open_run(args.run)
    print(f"qkviz stats: {run.n_layers * run.n_heads} heads, {run.n_tokens} tokens: wall "
          f"{seconds[len(seconds) // 2]:.1f} s median of {len(seconds)} (min {seconds[0]:.1f}); "
          f"peak RSS {max(m for _, m in timings):.0f} MB")
    timed = [{"run": args.run.name, "heads": run.n_layers * run.n_heads, "tokens": run.n_tokens,
              "seconds": summary([t for t, _ in timings]), "peak_mb": max(m for _, m in timings)}]
    described = []
    for path in [args.run, *args.also]:
        if load_atlas(open_run(path)) is None:
            seconds, peak_mb = time_stats(path)
            other = open_run(path)
            timed.append({"run": path.name, "heads": other.n_layers * other.n_heads, "tokens": other.n_tokens,
                          "seconds": summary([seconds]), "peak_mb": peak_mb})
            print(f"qkviz stats on {path.name}: {seconds:.1f} s, peak RSS {peak_mb:.0f} MB")
        described.append(describe(path))
    print(f"wrote {recorder.write(goal_seconds=120, timings=timed, runs=described)}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: the head atlas's statistics at 72 heads, wall time of ``qkviz stats`` in a child process
STATS_TIME = Goal("`qkviz stats` with every statistic at 72 heads", 120, "s", True, "stats",
                  "wall time, median", lambda found: next((row["seconds"]["median"] for row in found["timings"]
                                                           if row["heads"] == 72), None), 1)

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


if __name__ == "__main__":
    main()
