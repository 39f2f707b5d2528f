"""Head-atlas labels benchmark: ``qkviz stats`` (its repeated-token probe included) on the three bundled models over
held-out text, timed, and the labels it gives.

    python -m bench.atlas_labels [--models minilm,smollm2,gemma3] [--tokens 5000] [--repeats 3]
                                 [--runs-dir runs] [--run RUN] [--out bench/results/atlas_labels.json]

Each model's run is made when missing: ``qkviz extract`` over data/classics.txt from line 3100 on (0-based; text no
label rule was tuned on) up to ``--tokens`` tokens. Then ``qkviz -q stats`` (default options: the probe runs the
model) is timed end to end in a child process ``--repeats`` times, alternating the models (wall time and peak
memory; goal: SmolLM2 at 5,000 tokens within 2 minutes on 2 cores). For each run the result keeps the heads
per strongest label, the heads earning each label, the probe, and the strongest induction and previous-token heads.
``--run`` times one given run instead (the smoke test's).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

from qkviz import open_run  # noqa: E402

from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, model_name, source, span  # noqa: E402

QKVIZ = [sys.executable, "-m", "qkviz"]
#: the held-out text: data/classics.txt from this line on
FIRST_LINE = 3100


def make_run(model: str, path: Path, tokens: int) -> None:
    lines = (REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()[FIRST_LINE:]
    corpus = path.with_name(f"{path.name}-corpus.txt")
    corpus.parent.mkdir(parents=True, exist_ok=True)
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    child = run_measured([*QKVIZ, "-q", "extract", "--model", model, "--corpus", str(corpus), "--out", str(path),
                          "--max-tokens", str(tokens), "--overwrite"])
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz extract --model {model} failed with exit status {child['returncode']}")


def time_stats(run: Path) -> tuple[float, float]:
    child = run_measured([*QKVIZ, "-q", "stats", "--run", str(run)])
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz stats failed on {run} with exit status {child['returncode']}")
    return child["seconds"], child["peak_mb"]


def describe(path: Path) -> dict:
    """The run's labels: heads per strongest label, heads earning each label, the probe, the top copying heads."""
    run = open_run(path)
    atlas = run.atlas
    earned = atlas.labels.drop_duplicates(["layer", "head", "label"])
    found = {"model": run.model_id, "layers": run.n_layers, "heads": run.n_heads, "tokens": run.n_tokens,
             "strongest": {k: int(v) for k, v in atlas.table.label.value_counts().items()},
             "earning": {k: int(v) for k, v in earned.label.value_counts().items()}, "probe": atlas.probe_note}
    found["writes"] = atlas.writes_note
    if atlas.probes is not None:      # the copying labels' control: the same rule on the shuffled targets
        from qkviz.analysis.labels import writing_labels

        control = writing_labels(atlas.probes, atlas.thresholds, control=True)
        found["writing_control"] = {label: len({(row[0], row[1]) for row in control if row[2] == label})
                                    for label in ("copying", "suppression")}
    for label in ("induction", "previous-token", "copying", "suppression"):
        top = atlas.labels[atlas.labels.label == label].sort_values("score", ascending=False)
        top = top.drop_duplicates(["layer", "head"]).head(5)
        found[f"top_{label}"] = [[int(row.layer), int(row.head), round(float(row.score), 3)]
                                 for row in top.itertuples()]
    print(f"{run.model_id} ({run.n_layers}x{run.n_heads} heads, {run.n_tokens} tokens): strongest "
          + ", ".join(f"{k} {v}" for k, v in found["strongest"].items()) + "; earning "
          + ", ".join(f"{k} {v}" for k, v in found["earning"].items()))
    return found


#: what the smoke test adds to ``--smoke``
SMOKE_ARGUMENTS = ("--run", "{run}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,smollm2,gemma3")
    parser.add_argument("--tokens", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs-dir", type=Path, default=REPO / "runs")
    parser.add_argument("--run", type=Path, help="time this run only")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/atlas_labels.json)")
    args = smoke_arguments(parser, argv, out="out", repeats=1)
    recorder = Recorder("atlas_labels", vars(args), out=args.out)
    if args.run is not None:
        paths = [args.run]
    else:
        paths = [args.runs_dir / f"atlas-{model}" for model in args.models.split(",")]
        for model, path in zip(args.models.split(","), paths):
            if not (path / "manifest.json").exists():
                make_run(model, path, args.tokens)
    timings = {path: [] for path in paths}
    for repeat in range(args.repeats):
        for path in paths if repeat % 2 == 0 else paths[::-1]:     # alternate the order
            timings[path].append(time_stats(path))
    rows = []
    for path in paths:
        found = describe(path)
        found.update(run=path.name, seconds=summary([t for t, _ in timings[path]]),
                     peak_mb=max(m for _, m in timings[path]))
        print(f"  qkviz stats: {span(found['seconds'])} (min / median / max of {args.repeats}), "
              f"peak RSS {found['peak_mb']:.0f} MB")
        rows.append(found)
    print(f"wrote {recorder.write(runs=rows)}")


# -- figure blocks (``python -m bench.figures``) ---------------------------------------------------------------------

def _writes(run: dict) -> str:
    """One model's copying and suppression heads and their shuffled control, or why they were not computed."""
    note = run.get("writes") or "not run"
    if "writing_control" not in run or not note.startswith("repeated random tokens"):
        return f"{model_name(run['model'])}: {note}"
    control = ", ".join(f"{label} {count}" for label, count in run["writing_control"].items())
    return (f"{model_name(run['model'])}: copying {run['earning'].get('copying', 0)}, suppression "
            f"{run['earning'].get('suppression', 0)} heads, shuffled control {control} ({note})")


#: SmolLM2's atlas, probe included, at 5,000 tokens
SMOLLM2_STATS = Goal("`qkviz stats` on SmolLM2 at 5,000 tokens, probes included", 120, "s", True, "atlas_labels",
                     "wall time, median", lambda found: next((row["seconds"]["median"] for row in found["runs"]
                                                             if "smollm2" in row["model"]), None), 1)


@figure("atlas-labels")
def atlas_labels(results: Results) -> str:
    runs = results("atlas_labels")["runs"]
    names = [f"{model_name(run['model'])} ({run['layers'] * run['heads']} heads, {run['tokens']:,} tokens)"
             for run in runs]
    labels = list(dict.fromkeys(label for run in runs for label in (*run["earning"], *run["strongest"])))
    body = "\n".join(f"| {label} | " + " | ".join(f"{run['earning'].get(label, 0)} / {run['strongest'].get(label, 0)}"
                                                  for run in runs) + " |" for label in labels)
    tops = "; ".join(f"{model_name(run['model'])}: induction "
                     + (", ".join(f"L{l} H{h} {s:.2f}" for l, h, s in run["top_induction"]) or "none")
                     + "; previous-token "
                     + (", ".join(f"L{l} H{h} {s:.2f}" for l, h, s in run["top_previous-token"]) or "none")
                     for run in runs)
    writes = "; ".join(_writes(run) for run in runs)
    times = "; ".join(f"{model_name(run['model'])} {span(run['seconds'])} (peak RSS {run['peak_mb']:,.0f} MB)"
                      for run in runs)
    return (f"| label: heads earning it / heads whose strongest label it is | {' | '.join(names)} |\n"
            f"|---|{'---|' * len(runs)}\n{body}\n\n"
            f"Strongest heads (score): {tops}.\n\n"
            f"What heads write (the copying probe): {writes}.\n\n"
            f"`qkviz stats`, probe included, in a child process, min / median / max: {times}; goal on SmolLM2 "
            f"{verdict(SMOLLM2_STATS, results)}. Held-out text (data/classics.txt from line {FIRST_LINE}); "
            f"`bench/atlas_labels.py` ({source(results, 'atlas_labels')}).\n")


if __name__ == "__main__":
    main()
