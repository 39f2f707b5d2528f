"""The extraction figure blocks (``python -m bench.figures``), drawn from :mod:`bench.extract`'s result files.

* ``extract``: the goal's measure, held-out text at the count where the fixed steps no longer stand out (MiniLM at
  100,000 tokens, SmolLM2 at 10,000: :data:`GOAL_FILES`), each file's latest run, and where its time went; then the
  measure before it (the bundled corpus at 10,000 tokens: :data:`EARLIER_FILES`) in one line each.
* ``extract-goal``: the ratio goals' verdicts, judged on every pair of every run of the latest run's code, and every
  run of every file listed, the earlier measure's too, so that none is set aside. A goal whose file is not written yet
  carries no number: the block names the command that measures it.
"""

from __future__ import annotations

from bench.figures.goals import Goal, median, verdict
from bench.figures.results import Results, figure, model_name, source, span
from bench.harness import load_span

#: the token count each model's goal names (``bench.extract``'s ``--tokens`` by default)
GOAL_TOKENS = {"minilm": 100_000, "smollm2": 10_000}
#: the goal's measure: held-out text (``data/classics.txt``) at that count, each model's file
GOAL_FILES = {model: f"extract_{model}_{tokens // 1000}k" for model, tokens in GOAL_TOKENS.items()}
#: the measure before it: the bundled corpus (``data/sentences.txt`` repeated) at 10,000 tokens
EARLIER_FILES = {"minilm": "extract_minilm", "smollm2": "extract_smollm2"}
#: the command that writes each goal file
COMMANDS = {"minilm": "python -m bench.extract --model minilm", "smollm2": "python -m bench.extract --model smollm2"}


def recorded_runs(found: dict) -> list[dict]:
    """Every run a result file holds, oldest first (a file written before runs were kept: its one run, its code
    and load not recorded there)."""
    return found.get("runs") or [{"date": found["date"], "code": "unknown", "load_average": None,
                                  "ratio": found["ratio"]}]


def judged_runs(found: dict) -> list[dict]:
    """The runs a ratio goal is judged on: every run of the latest run's code (the latest alone where its code was
    not recorded)."""
    runs = recorded_runs(found)
    if runs[-1]["code"] == "unknown":
        return runs[-1:]
    return [run for run in runs if run["code"] == runs[-1]["code"]]


def judged_ratio(found: dict) -> float:
    """The median of every pair of every run of the latest run's code."""
    return median(value for run in judged_runs(found) for value in run["ratio"]["values"])


#: extraction's goals: a ratio over a bare forward pass (wall times) on each bundled model at its goal's count, a peak
#: at 100,000 tokens
JUDGED = "median of every pair of every run of the latest run's code"
EXTRACT_RATIO = Goal("`qkviz.extract` against a bare forward pass, MiniLM at 100,000 tokens", 1.25, "", True,
                     GOAL_FILES["minilm"], JUDGED, judged_ratio, 2)
EXTRACT_RATIO_SMOLLM2 = Goal("`qkviz.extract` against a bare forward pass, SmolLM2 at 10,000 tokens", 1.25, "", True,
                             GOAL_FILES["smollm2"], JUDGED, judged_ratio, 2)
RATIO_GOALS = {"minilm": EXTRACT_RATIO, "smollm2": EXTRACT_RATIO_SMOLLM2}


def peak_goal(result: str) -> Goal:
    """The peak RSS goal, read from ``result``'s child process."""
    return Goal("peak RSS of an extraction at 100,000 tokens", 4, "GB", True, result, "the child process's peak",
                lambda found: found["child_extract"]["peak_mb"] / 1024, 2)


EXTRACT_PEAK = peak_goal(GOAL_FILES["minilm"])
EXTRACT_PEAK_EARLIER = peak_goal(EARLIER_FILES["minilm"])


def at_goal_count(found: dict, model: str) -> bool:
    """Whether a result measured what ``model``'s goal names: its count of held-out text."""
    arguments = found["arguments"]
    return arguments.get("corpus") == "held-out" and arguments.get("tokens") == GOAL_TOKENS[model]


def measured(results: Results, files: dict[str, str]) -> list[str]:
    """The files of ``files`` that are written, in model order."""
    return [name for name in files.values() if results.exists(name)]


@figure("extract")
def extract(results: Results) -> str:
    names = measured(results, GOAL_FILES)
    missing = [model for model, name in GOAL_FILES.items() if name not in names]
    text = goal_table(results, names) if names else ""
    if missing:
        text += ("Not measured yet at the counts issue 53 names: " + "; ".join(
            f"{model_name(model)} at {GOAL_TOKENS[model]:,} tokens (`{COMMANDS[model]}`)"
            for model in missing) + ".\n\n")
    return text + earlier_measure(results)


def goal_table(results: Results, names: list[str]) -> str:
    columns = [results(name) for name in names]
    labels = [f"{model_name(r['arguments']['model'])}, {r['tokens']:,} tokens, {r['arguments']['dtype']}" for r in columns]

    def corpus(r: dict) -> str:
        kind = r.get("corpus", {"kind": "bundled", "file": "data/sentences.txt", "copies": 0})
        return (f"`{kind['file']}`" + (" (held out)" if kind["kind"] == "held-out" else "")
                + (f", its lines repeated {kind['copies']}×" if kind["copies"] > 1 else ", no line twice"))

    rows = [("text", [corpus(r) for r in columns]),
            ("bare forward pass (model loaded)", [span(r["bare_forward_s"], 2, " s") for r in columns]),
            ("`qkviz.extract`, all included (its model load too)", [span(r["extract_s"], 2, " s") for r in columns]),
            ("a warm load of the model", [span(r["warm_model_load_s"], 2, " s") for r in columns]),
            ("ratio extract / bare forward", [span(r["ratio"], 2, "") for r in columns]),
            ("ratio less the pair's warm model load", [span(r["ratio_without_model_load"], 2, "") for r in columns]),
            ("CPU seconds, extract / bare (not judged)",
             [span(r["cpu_ratio"], 2, "") if "cpu_ratio" in r else "not measured" for r in columns]),
            ("1-minute load average, each pair's lowest to highest",
             [pair_loads(r) for r in columns]),
            ("a run in a child process: tokens, wall, its peak RSS, run size",
             [f"{c['tokens']:,}, {c['seconds']:.1f} s, {c['peak_mb']:,} MB, {c['run_mb']:,} MB"
              if (c := r.get("child_extract")) else "not run" for r in columns])]
    table = "\n".join(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows)
    pairs = " and ".join(sorted({str(r["ratio"]["runs"]) for r in columns}))
    return (f"| the latest run, min / median / max of {pairs} pairs | " + " | ".join(labels) + " |\n|---|"
            + "---|" * len(columns) + f"\n{table}\n\n{extract_steps(columns, labels)}({source(results, *names)}.)\n\n")


def pair_loads(result: dict) -> str:
    """The lowest and highest 1-minute load average over the latest run's pairs (before and after each)."""
    found = [value for pair in result.get("pairs", []) for value in pair["load_average"]]
    return f"{min(found):.1f}–{max(found):.1f} of {result['machine']['cpus']} cores" if found else "not recorded"


def earlier_measure(results: Results) -> str:
    """The measure before the goal's: each bundled model's latest ratio on the bundled corpus."""
    names = measured(results, EARLIER_FILES)
    if not names:
        return ""
    parts = [f"{model_name(results(name)['arguments']['model'])} {results(name)['tokens']:,} tokens, ratio "
             f"{span(results(name)['ratio'], 2, '')}" for name in names]
    return (f"The measure before, on the bundled corpus (`data/sentences.txt` repeated), latest runs, min / median / "
            f"max of their pairs: {'; '.join(parts)}. ({source(results, *names)}.)\n")


#: what each of ``qkviz.extract``'s steps (``ExtractionResult.steps``) is, as the block names it
STEP_LABELS = {"corpus": "reading the corpus", "model": "loading the model", "select": "tokenizing and selecting",
               "hash": "waiting for the weights' hash", "gate": "the exactness gate", "logit_parts": "the logit parts",
               "capture": "the capture (forward passes, every query and key stored)", "tables": "the tables and manifest",
               "finish": "the last writes"}


def extract_steps(columns: list[dict], labels: list[str]) -> str:
    """Where an extraction's time goes, step by step (medians), and the capture's cost over the bare forward pass;
    nothing where the result files do not hold the steps."""
    measured_steps = [(result, label) for result, label in zip(columns, labels) if "steps_s" in result]
    if not measured_steps:
        return ""
    parts = []
    for result, label in measured_steps:
        steps, bare = result["steps_s"], result["bare_forward_s"]["median"]
        named = ", ".join(f"{STEP_LABELS.get(step, step)} {spent:.2f} s" for step, spent in steps.items())
        besides = sum(spent for step, spent in steps.items() if step != "capture")
        beyond = besides + steps.get("capture", bare) - bare
        parts.append(f"{label}: {named}; the capture {steps.get('capture', 0) / bare:.2f}× the bare forward pass, the "
                     f"steps besides it {besides:.2f} s ({besides / bare:.2f}× the forward pass), all but the forward "
                     f"pass {beyond:.2f} s ({beyond / bare:.2f}× it)")
    return "Where the time goes (medians of the steps): " + "; ".join(parts) + ". "


@figure("extract-goal")
def extract_goal(results: Results) -> str:
    verdicts = []
    for model, goal in RATIO_GOALS.items():
        name = GOAL_FILES[model]
        if not results.exists(name):
            verdicts.append(f"{model_name(model)}'s not measured yet (`{COMMANDS[model]}`)")
        elif not at_goal_count(results(name), model):
            verdicts.append(f"{model_name(model)}'s not judged: `bench/results/{name}.json` measured "
                            f"{results(name)['arguments']['tokens']:,} tokens of the {results(name)['arguments']['corpus']} "
                            f"corpus, not {GOAL_TOKENS[model]:,} of held-out text (`{COMMANDS[model]}`)")
        else:
            verdicts.append(f"{model_name(model)}'s {verdict(goal, results)}")
    peak_from = EXTRACT_PEAK if results.exists(GOAL_FILES["minilm"]) and "child_extract" in results(
        GOAL_FILES["minilm"]) else EXTRACT_PEAK_EARLIER
    child = results(peak_from.result).get("child_extract") if results.exists(peak_from.result) else None
    peak = (f"peak RSS at 100,000 tokens {verdict(peak_from, results)}, at {child['tokens']:,} tokens "
            f"(`bench/results/{peak_from.result}.json`)" if child else "peak RSS not measured (`--rss-tokens 0`)")
    names = measured(results, GOAL_FILES) + measured(results, EARLIER_FILES)
    return (f"Goals: the ratio over a bare forward pass, {'; '.join(verdicts)}; {peak}. "
            f"{every_run(results, names)} ({source(results, *names)}.)\n")


def every_run(results: Results, names: list[str]) -> str:
    """Every run of each file's ratio, oldest first: its date, code, load, pairs and ratio (min / median / max),
    whether the verdict counts it, and the runs whose figures were not kept."""
    parts = []
    for name in names:
        found = results(name)
        goal_file = name in GOAL_FILES.values()
        judged = judged_runs(found) if goal_file else []
        listed = []      # (date, order on that date, text): a run not kept was set aside for a run after it
        header_load = None if found.get("runs") else load_span(results.record(name).get("load", {}))
        for run in recorded_runs(found):
            load = run.get("load_average") or header_load
            where = f"load {load['min']:.1f}–{load['max']:.1f}" if load else "load not recorded"
            code = ("judged" if run in judged else "the measure before, not judged" if not goal_file
                    else "earlier code, not judged" if run["code"] != "unknown" else "code not recorded, not judged")
            listed.append((run["date"][:10], 1, f"{run['date'][:10]} ({code}; {where}): {run['ratio']['runs']} pairs "
                                                f"{span(run['ratio'], 2, '')}"))
        listed += [(run["date"][:10], 0, f"{run['date'][:10]} (not kept: {run['why']}): {run['pairs']} pairs, "
                                         f"median {run['median']:.2f}") for run in found.get("runs_not_kept", [])]
        what = (f"{found['tokens']:,} tokens, held-out text" if goal_file
                else f"{found['tokens']:,} tokens, the bundled corpus")
        parts.append(f"{model_name(found['arguments']['model'])}'s runs ({what}), every one written, min / median / "
                     f"max of the pairs: " + "; ".join(text for _, _, text in sorted(listed, key=lambda item: item[:2])))
    return ". ".join(parts) + "."

