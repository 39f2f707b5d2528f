"""Extraction benchmark: tokens per second, extraction time over a bare forward pass, peak memory.

    python -m bench.extract [--model minilm] [--tokens 10000] [--repeats 3] [--rss-tokens 100000]

* ratio: wall time of ``qkviz.extract`` (tokenizing, capturing, writing, manifest; the model is
  loaded and hashed inside it) over a bare forward pass of the same model over the same batches, in one
  process; the median of ``--repeats`` pairs, each pair in the other order than the one before (bare first,
  then extract first, ...), so that both meet the same load and the same warm caches.
* ratio without the model's load: each pair also times a load of the model just before its extract (warm, as
  the extract's own load is: the first, cold load is left out of every figure) and subtracts that one.
* peak RSS: ``qkviz extract`` of ``--rss-tokens`` tokens in a child process, that process's own peak
  (its memory's high-water mark, ``VmHWM``; ``bench.harness``).
The corpus is the bundled one, repeated as often as needed to reach the token counts. ``--json`` (default
``bench/results/extract_<model>.json``) records every figure with the date, machine, load averages and arguments.

**Every run is kept.** The file's ``runs`` lists every run of the same measure (model, tokens, dtype, batch size,
device) written to it, oldest first, the new one last: its date, commit, the extraction code it measured (the git
tree of ``qkviz/`` and a digest of its uncommitted changes), the load, and every pair's ratio; ``runs_not_kept``
holds runs whose figures were not written (only what is known of them). The goal is judged on every pair of every
run of the latest run's code, and the page lists every run (:func:`every_run`), so no run can be set aside.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import qkviz  # noqa: E402
from qkviz.extraction import extract_run  # noqa: E402
from qkviz.extraction import model_adapter  # noqa: E402
from qkviz.extraction import DEFAULT_CORPUS, load_corpus  # noqa: E402
from qkviz.extraction.streaming import CHUNK_BYTES, bytes_per_token, chunk_sentences, pad_token_id, padded_batch  # noqa: E402
from qkviz.extraction import load_model  # noqa: E402
from qkviz.extraction.inputs import select_sentences  # noqa: E402
from bench.harness import Recorder, run_measured, smoke_arguments, summary  # noqa: E402
from bench.figures.goals import Goal, median, verdict  # noqa: E402
from bench.figures.results import Results, figure, model_name, source, span  # noqa: E402


def repeated_corpus(directory: Path, copies: int) -> Path:
    lines = DEFAULT_CORPUS.read_text(encoding="utf-8").splitlines()
    path = directory / f"corpus-x{copies}.txt"
    path.write_text("\n".join(lines * copies) + "\n", encoding="utf-8")
    return path


def bare_forward_seconds(loaded, sentences, batch_size: int, dtype: str) -> float:
    """The same chunks and length-sorted batches as extraction, with no capture and no writing."""
    model, adapter = loaded.model, model_adapter(loaded.model)
    limit = max(1, CHUNK_BYTES // bytes_per_token(adapter.shape(model.config), np.dtype(dtype)))
    pad = pad_token_id(loaded.tokenizer)
    device = str(next(model.parameters()).device)
    start = time.perf_counter()
    with torch.inference_mode():
        for first, end, _ in chunk_sentences(sentences, limit):
            chunk = sorted(sentences[first:end], key=len, reverse=True)
            for offset in range(0, len(chunk), batch_size):
                input_ids, attention_mask = padded_batch(chunk[offset:offset + batch_size], pad, device)
                model(input_ids=input_ids, attention_mask=attention_mask)
    return time.perf_counter() - start


#: the arguments that make two runs the same measure (runs of other arguments are not carried into the file)
MEASURE = ("model", "tokens", "dtype", "batch_size", "device")


def code_state() -> str:
    """The code a run measures: the git tree of ``qkviz/`` at HEAD (12 digits), ``+`` a digest of its uncommitted
    changes (tracked and untracked) when there are any; ``unknown`` outside a git checkout."""
    def git(*arguments: str) -> str:
        done = subprocess.run(["git", "-C", str(REPO), *arguments], capture_output=True)
        return done.stdout.decode(errors="replace") if done.returncode == 0 else ""
    tree = git("rev-parse", "HEAD:qkviz").strip()
    if not tree:
        return "unknown"
    changes = git("diff", "HEAD", "--", "qkviz") + git("ls-files", "--others", "--exclude-standard", "--", "qkviz")
    return tree[:12] + (f"+{hashlib.sha256(changes.encode()).hexdigest()[:8]}" if changes else "")


def load_span(load: dict) -> dict | None:
    """The lowest and highest 1-minute load average of a result header's ``load`` (before, during, after)."""
    found = [values[0] for values in (load.get("before"), load.get("after")) if isinstance(values, list) and values]
    found += [value for value in load.get("during") or [] if isinstance(value, (int, float))]
    return {"min": min(found), "max": max(found)} if found else None


def run_record(header: dict, load: dict, figures: dict, code: str) -> dict:
    """One run as the file's ``runs`` keeps it."""
    commit = header.get("commit")
    return {"date": header["date"], "commit": commit.get("sha", "unknown") if isinstance(commit, dict) else commit,
            "code": code, "load_average": load_span(load), "tokens": figures["tokens"], "ratio": figures["ratio"],
            "ratio_without_model_load": figures["ratio_without_model_load"]}


def earlier_runs(path: Path, arguments: dict) -> tuple[list[dict], list[dict]]:
    """The runs (and runs not kept) of the same measure that ``path`` already holds: its ``runs``, or, in a file
    written before runs were kept, the one run it holds (its code not recorded)."""
    if not path.exists():
        return [], []
    earlier = json.loads(path.read_text(encoding="utf-8"))
    if any(earlier.get("arguments", {}).get(name) != arguments[name] for name in MEASURE):
        print(f"{path} measured other arguments ({', '.join(MEASURE)}): its runs are not carried")
        return [], []
    figures = earlier["figures"]
    runs = figures.get("runs") or [run_record(earlier, earlier.get("load", {}), figures, "unknown")]
    return runs, figures.get("runs_not_kept", [])


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--model', '{model}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rss-tokens", type=int, default=100_000, help="0 skips the memory run")
    parser.add_argument("--json", type=Path, help="default: bench/results/extract_<model>.json")
    args = smoke_arguments(parser, argv, out='json', tokens=300, repeats=1, rss_tokens=0, dtype='float32')
    recorder = Recorder(f"extract_{args.model}", vars(args), args.json)
    runs, not_kept = earlier_runs(recorder.out, recorder.header["arguments"])
    code = code_state()
    figures: dict = {}
    print(f"torch threads: {torch.get_num_threads()}, model {args.model}, device {args.device}, dtype {args.dtype}")

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        copies = max(1, -(-max(args.tokens, args.rss_tokens) // 11_000) + 1)
        corpus = repeated_corpus(scratch, copies)
        loaded = load_model(args.model, device=args.device)     # cold: not timed
        sentences = select_sentences(load_corpus(corpus).sentences, loaded.tokenizer, None, args.tokens, None, 0)
        n_tokens = sum(len(s) for s in sentences)

        steps: list[dict[str, float]] = []

        def timed_extract(repeat: int) -> tuple[float, float]:
            """(the extract's seconds, a warm load of the model's seconds just before it); its steps' seconds into
            ``steps``."""
            load_start = time.perf_counter()
            load_model(args.model, device=args.device)
            load = time.perf_counter() - load_start
            result = extract_run(args.model, corpus, scratch / f"run{repeat}", max_tokens=args.tokens,
                                 dtype=args.dtype, batch_size=args.batch_size, device=args.device)
            steps.append(result.steps)
            return result.seconds, load

        # one untimed pass first: torch's first forward pass warms its kernels and allocator (4x a later one here),
        # which would land in whichever side ran first
        bare_forward_seconds(loaded, sentences, args.batch_size, args.dtype)
        bare, full, loads = [], [], []
        for repeat in range(args.repeats):
            if repeat % 2:
                full_s, load_s = timed_extract(repeat)
                bare.append(bare_forward_seconds(loaded, sentences, args.batch_size, args.dtype))
            else:
                bare.append(bare_forward_seconds(loaded, sentences, args.batch_size, args.dtype))
                full_s, load_s = timed_extract(repeat)
            full.append(full_s)
            loads.append(load_s)
        ratios = [f / b for f, b in zip(full, bare)]
        unloaded = [(f - load) / b for f, load, b in zip(full, loads, bare)]
        bare_s, full_s = statistics.median(bare), statistics.median(full)
        print(f"tokens per run: {n_tokens} ({len(sentences)} sentences)")
        print(f"bare forward: median {bare_s:.2f} s ({n_tokens / bare_s:,.0f} tok/s)")
        print(f"qkviz extract: median {full_s:.2f} s ({n_tokens / full_s:,.0f} tok/s); a warm model load: median "
              f"{statistics.median(loads):.2f} s")
        print(f"ratio extract / bare forward: median {statistics.median(ratios):.2f} (without its pair's warm model "
              f"load: {statistics.median(unloaded):.2f}); pairs {[round(r, 2) for r in ratios]}")
        step_medians = {step: round(statistics.median(run[step] for run in steps), 3) for step in steps[0]}
        print("the extract's steps, medians: " + ", ".join(f"{step} {spent:.2f} s" for step, spent in step_medians.items()))
        figures.update(tokens=n_tokens, sentences=len(sentences), bare_forward_s=summary(bare, 2),
                       extract_s=summary(full, 2), warm_model_load_s=summary(loads, 2), ratio=summary(ratios, 2),
                       ratio_without_model_load=summary(unloaded, 2), steps_s=step_medians)

        if args.rss_tokens:
            out = scratch / "rss-run"
            child = run_measured([sys.executable, "-m", "qkviz", "-q", "extract", "--model", args.model, "--corpus",
                                  str(corpus), "--out", str(out), "--max-tokens", str(args.rss_tokens), "--dtype",
                                  args.dtype, "--device", args.device])
            if child["returncode"] != 0:
                raise SystemExit(f"qkviz extract failed with exit status {child['returncode']}")
            run = qkviz.open_run(out)
            size_mb = sum(f.stat().st_size for f in out.iterdir()) / 2**20
            print(f"{run.n_tokens} tokens in a child process: {child['seconds']:.1f} s wall, its peak RSS "
                  f"{child['peak_mb']:,.0f} MB, run directory {size_mb:,.0f} MB")
            figures["child_extract"] = {"tokens": run.n_tokens, "seconds": round(child["seconds"], 1),
                                        "peak_mb": round(child["peak_mb"]), "run_mb": round(size_mb)}
    load = {"before": recorder.before, "during": list(recorder.during), "after": [round(v, 2) for v in os.getloadavg()]}
    figures["runs"] = [*runs, run_record(recorder.header, load, figures, code)]
    figures["runs_not_kept"] = not_kept
    print("every run of this measure: " + "; ".join(f"{run['date'][:10]} {run['code']}: {run['ratio']['median']}"
                                                   for run in figures["runs"]))
    print(recorder.write(**figures))


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

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


#: extraction's goals: a ratio over a bare forward pass (wall times) on each bundled model, a peak at 100,000 tokens
JUDGED = "median of every pair of every run of the latest run's code"
EXTRACT_RATIO = Goal("`qkviz.extract` against a bare forward pass, MiniLM", 1.25, "", True, "extract_minilm",
                     JUDGED, judged_ratio, 2)
EXTRACT_RATIO_SMOLLM2 = Goal("`qkviz.extract` against a bare forward pass, SmolLM2", 1.25, "", True, "extract_smollm2",
                             JUDGED, judged_ratio, 2)

EXTRACT_PEAK = Goal("peak RSS of an extraction at 100,000 tokens", 4, "GB", True, "extract_minilm",
                    "the child process's peak", lambda found: found["child_extract"]["peak_mb"] / 1024, 2)

# -- extraction ------------------------------------------------------------------------------------
@figure("extract-goal")
def extract_goal(results: Results) -> str:
    result = results("extract_minilm")
    child = result.get("child_extract")
    peak = (f"peak RSS at 100,000 tokens {verdict(EXTRACT_PEAK, results)}, at {child['tokens']:,} tokens" if child
            else "peak RSS not measured in this run (`--rss-tokens 0`)")
    measured = results.exists("extract_smollm2")
    smollm2 = f"; SmolLM2's {verdict(EXTRACT_RATIO_SMOLLM2, results)}" if measured else "; SmolLM2's not measured"
    names = ["extract_minilm", *(["extract_smollm2"] if measured else [])]
    return (f"Goals: the ratio over a bare forward pass, MiniLM's {verdict(EXTRACT_RATIO, results)}{smollm2}; {peak}. "
            f"{every_run(results, names)} ({source(results, *names)}.)\n")


def every_run(results: Results, names: list[str]) -> str:
    """Every run of each model's ratio, oldest first: its date, code, load, pairs and ratio (min / median / max),
    whether the verdict counts it, and the runs whose figures were not kept."""
    parts = []
    for name in names:
        found = results(name)
        judged = judged_runs(found)
        listed = []      # (date, order on that date, text): a run not kept was set aside for a run after it
        header_load = None if found.get("runs") else load_span(results.record(name).get("load", {}))
        for run in recorded_runs(found):
            load = run.get("load_average") or header_load
            where = f"load {load['min']:.1f}–{load['max']:.1f}" if load else "load not recorded"
            code = ("judged" if run in judged else "earlier code, not judged" if run["code"] != "unknown"
                    else "code not recorded, not judged")
            listed.append((run["date"][:10], 1, f"{run['date'][:10]} ({code}; {where}): {run['ratio']['runs']} pairs "
                                                f"{span(run['ratio'], 2, '')}"))
        listed += [(run["date"][:10], 0, f"{run['date'][:10]} (not kept: {run['why']}): {run['pairs']} pairs, "
                                         f"median {run['median']:.2f}") for run in found.get("runs_not_kept", [])]
        parts.append(f"{model_name(found['arguments']['model'])}'s runs, every one written, min / median / max of "
                     f"the pairs: " + "; ".join(text for _, _, text in sorted(listed, key=lambda item: item[:2])))
    return ". ".join(parts) + "."

@figure("extract")
def extract(results: Results) -> str:
    names = [name for name in ("extract_minilm", "extract_smollm2") if results.exists(name)] or ["extract_minilm"]
    columns = [results(name) for name in names]
    labels = [f"{result['arguments']['model']} {result['arguments']['dtype']}" for result in columns]

    rows = [("tokens per run", [f"{r['tokens']:,}" for r in columns]),
            ("bare forward pass", [span(r["bare_forward_s"], 2, " s") for r in columns]),
            ("`qkviz.extract`, all included", [span(r["extract_s"], 2, " s") for r in columns]),
            ("a warm load of the model", [span(r["warm_model_load_s"], 2, " s") for r in columns]),
            ("ratio extract / bare forward", [span(r["ratio"], 2, "") for r in columns]),
            ("ratio less the pair's warm model load", [span(r["ratio_without_model_load"], 2, "") for r in columns]),
            ("a run in a child process: tokens, wall, its peak RSS, run size",
             [f"{c['tokens']:,}, {c['seconds']:.1f} s, {c['peak_mb']:,} MB, {c['run_mb']:,} MB"
              if (c := r.get("child_extract")) else "not run" for r in columns])]
    table = "\n".join(f"| {name} | " + " | ".join(cells) + " |" for name, cells in rows)
    pairs = " and ".join(sorted({str(r["ratio"]["runs"]) for r in columns}))
    return (f"| the latest run, min / median / max of {pairs} pairs | " + " | ".join(labels) + " |\n|---|"
            + "---|" * len(columns) + f"\n{table}\n\n{extract_steps(columns, labels)}({source(results, *names)}.)\n")


#: what each of ``qkviz.extract``'s steps (``ExtractionResult.steps``) is, as the block names it
STEP_LABELS = {"corpus": "reading the corpus", "model": "loading the model", "select": "tokenizing and selecting",
               "hash": "waiting for the weights' hash", "gate": "the exactness gate", "logit_parts": "the logit parts",
               "capture": "the capture (forward passes, every query and key stored)", "tables": "the tables and manifest",
               "finish": "the last writes"}


def extract_steps(columns: list[dict], labels: list[str]) -> str:
    """Where an extraction's time goes, step by step (medians), and the capture's cost over the bare forward pass;
    nothing where the result files do not hold the steps."""
    measured = [(result, label) for result, label in zip(columns, labels) if "steps_s" in result]
    if not measured:
        return ""
    parts = []
    for result, label in measured:
        steps, bare = result["steps_s"], result["bare_forward_s"]["median"]
        named = ", ".join(f"{STEP_LABELS.get(step, step)} {spent:.2f} s" for step, spent in steps.items())
        besides = sum(spent for step, spent in steps.items() if step != "capture")
        beyond = besides + steps.get("capture", bare) - bare
        parts.append(f"{label}: {named}; the capture {steps.get('capture', 0) / bare:.2f}× the bare forward pass, the "
                     f"steps besides it {besides:.2f} s ({besides / bare:.2f}× the forward pass), all but the forward "
                     f"pass {beyond:.2f} s ({beyond / bare:.2f}× it)")
    return "Where the time goes (medians of the steps): " + "; ".join(parts) + ". "


if __name__ == "__main__":
    main()
