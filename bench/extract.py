"""Extraction benchmark: ``qkviz.extract``'s wall time over a bare forward pass, tokens per second, peak memory.

    python -m bench.extract --model minilm      # 100,000 tokens of held-out text (bench/results/extract_minilm_100k.json)
    python -m bench.extract --model smollm2     # 10,000 tokens (bench/results/extract_smollm2_10k.json)
    python -m bench.extract [--model M] [--tokens N] [--corpus held-out|bundled] [--repeats 3] [--rss-tokens N]

* **corpus**: ``held-out`` (the default) is ``data/classics.txt``, two public-domain books no default was tuned on
  (about 150,000 MiniLM tokens: 100,000 need no line twice; a count past the file repeats it, and the result says
  how often); ``bundled`` is ``data/sentences.txt`` repeated as often as the count needs (the measure before).
* **tokens**: by default the count the goal names for the model (:data:`GOAL_TOKENS`: MiniLM 100,000, SmolLM2
  10,000), where the fixed steps (loading, the exactness gate, the tables) no longer stand out; 10,000 otherwise.
* **ratio**: wall time of ``qkviz.extract`` (reading and tokenizing the corpus, loading and hashing the model, the
  exactness gate, capturing, writing, the manifest: everything the command does once its process runs) over a bare
  forward pass of the same model over the same batches, in one process; the model's load is *included* on the
  extract's side and *excluded* on the bare side (a loaded model is what a forward pass needs). ``--repeats`` pairs,
  each in the other order than the one before (bare first, then extract first, ...), so that both meet the same load
  and the same warm caches; each pair's 1-minute load average before and after it is kept with it.
* **ratio without the model's load**: each pair also times a warm load of the model just before its extract (warm, as
  the extract's own load is: the first, cold load is left out of every figure) and subtracts it.
* **CPU ratio**: the process's CPU seconds (every thread's) on each side, a check on the wall ratio under load; no
  goal is judged on it.
* **peak RSS**: ``qkviz extract`` of ``--rss-tokens`` tokens in a child process, that process's own peak (its memory's
  high-water mark, ``VmHWM``; ``bench.harness``).
``--json`` (default ``bench/results/extract_<model>_<tokens>k.json``; the bundled corpus's
``bench/results/extract_<model>.json``) records every figure with the date, machine, load averages and arguments.

**Every run is kept.** The file's ``runs`` lists every run of the same measure (:data:`MEASURE`) written to it, oldest
first, the new one last: its date, commit, the extraction code it measured (the git tree of ``qkviz/`` and a digest of
its uncommitted changes), the load, and every pair's ratio; ``runs_not_kept`` holds runs whose figures were not written
(only what is known of them). A file of another measure is never written over: give another ``--json``. The goal is
judged on every pair of every run of the latest run's code, and the page lists every run (:mod:`bench.extract_figures`),
so no run can be set aside.
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
from bench.extract_figures import GOAL_TOKENS  # noqa: E402
from bench.harness import load_span  # noqa: E402

#: the held-out text (no default was tuned on it) and the bundled corpus, by ``--corpus``
CORPORA = {"held-out": REPO / "data" / "classics.txt", "bundled": DEFAULT_CORPUS}
#: the tokens of the untimed warm-up pass (a bare pass over the first sentences up to this many, and the longest batch)
WARM_UP_TOKENS = 2_000


def corpus_file(directory: Path, kind: str, tokens: int, tokenizer) -> tuple[Path, int]:
    """The corpus of ``kind`` (:data:`CORPORA`) holding at least ``tokens`` tokens for ``tokenizer``, and how many
    copies of its file that took (1: the file itself; more: written into ``directory``, its lines repeated). The bundled
    corpus is repeated as the measure before repeated it."""
    source = CORPORA[kind]
    lines = source.read_text(encoding="utf-8").splitlines()
    if kind == "bundled":        # as the measure before made it: always repeated, about 11,000 tokens a copy
        copies = max(1, -(-tokens // 11_000) + 1)
    else:
        copies = max(1, -(-tokens // sum(len(ids) for ids in tokenizer([line for line in lines if line.strip()])["input_ids"])))
    if copies == 1 and kind != "bundled":
        return source, 1
    path = directory / f"{source.stem}-x{copies}.txt"
    path.write_text("\n".join(lines * copies) + "\n", encoding="utf-8")
    return path, copies


def default_result(model: str, corpus: str, tokens: int) -> Path:
    """``bench/results/extract_<model>_<tokens>k.json`` for the held-out text, ``extract_<model>.json`` for the bundled
    corpus (the files of the measure before)."""
    name = f"extract_{Path(model).name}"
    if corpus == "held-out":
        name += f"_{tokens // 1000}k" if tokens % 1000 == 0 else f"_{tokens}"
    return REPO / "bench" / "results" / f"{name}.json"


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
MEASURE = ("model", "tokens", "corpus", "dtype", "batch_size", "device")


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


def run_record(header: dict, load: dict, figures: dict, code: str) -> dict:
    """One run as the file's ``runs`` keeps it."""
    commit = header.get("commit")
    return {"date": header["date"], "commit": commit.get("sha", "unknown") if isinstance(commit, dict) else commit,
            "code": code, "load_average": load_span(load), "tokens": figures["tokens"], "ratio": figures["ratio"],
            "ratio_without_model_load": figures["ratio_without_model_load"],
            **({"pairs": figures["pairs"]} if "pairs" in figures else {})}


def earlier_runs(path: Path, arguments: dict) -> tuple[list[dict], list[dict]]:
    """The runs (and runs not kept) of the same measure that ``path`` already holds: its ``runs``, or, in a file
    written before runs were kept, the one run it holds (its code not recorded). A file of another measure is refused
    (its runs would be lost): the run needs another ``--json``. A file written before ``--corpus`` measured the
    bundled corpus."""
    if not path.exists():
        return [], []
    earlier = json.loads(path.read_text(encoding="utf-8"))
    measured = {"corpus": "bundled", **earlier.get("arguments", {})}
    differing = [name for name in MEASURE if measured.get(name) != arguments[name]]
    if differing:
        raise SystemExit(f"{path} holds runs of another measure ({', '.join(differing)} differ); give another --json "
                         "so that none of its runs is lost")
    figures = earlier["figures"]
    runs = figures.get("runs") or [run_record(earlier, earlier.get("load", {}), figures, "unknown")]
    return runs, figures.get("runs_not_kept", [])


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--model', '{model}')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, help="default: the model's goal count (GOAL_TOKENS), else 10,000")
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="held-out")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rss-tokens", type=int, default=100_000, help="0 skips the memory run")
    parser.add_argument("--json", type=Path, help="default: bench/results/extract_<model>_<tokens>k.json")
    args = smoke_arguments(parser, argv, out='json', tokens=300, repeats=1, rss_tokens=0, dtype='float32')
    args.tokens = args.tokens or GOAL_TOKENS.get(args.model, 10_000)
    recorder = Recorder(f"extract_{args.model}", vars(args), args.json or default_result(args.model, args.corpus,
                                                                                           args.tokens))
    runs, not_kept = earlier_runs(recorder.out, recorder.header["arguments"])
    code = code_state()
    print(f"torch threads: {torch.get_num_threads()}, model {args.model}, device {args.device}, dtype {args.dtype}, "
          f"{args.tokens:,} tokens of the {args.corpus} corpus; result: {recorder.out}")
    with tempfile.TemporaryDirectory() as scratch:
        loaded = load_model(args.model, device=args.device)     # cold: not timed
        corpus, copies = corpus_file(Path(scratch), args.corpus, max(args.tokens, args.rss_tokens), loaded.tokenizer)
        figures = {"corpus": {"kind": args.corpus, "file": str(CORPORA[args.corpus].relative_to(REPO)),
                              "copies": copies}}
        figures.update(timed_pairs(args, loaded, corpus, Path(scratch)))
        if args.rss_tokens:
            figures["child_extract"] = child_extract(args, corpus, Path(scratch) / "rss-run")
    load = {"before": recorder.before, "during": list(recorder.during), "after": [round(v, 2) for v in os.getloadavg()]}
    figures["runs"] = [*runs, run_record(recorder.header, load, figures, code)]
    figures["runs_not_kept"] = not_kept
    print("every run of this measure: " + "; ".join(f"{run['date'][:10]} {run['code']}: {run['ratio']['median']}"
                                                   for run in figures["runs"]))
    print(recorder.write(**figures))


def timed_pairs(args, loaded, corpus: Path, scratch: Path) -> dict:
    """``--repeats`` pairs of a bare forward pass and ``qkviz.extract`` (see the module), in alternating order: their
    figures, and each pair as measured (its order, seconds, ratio, CPU seconds and load)."""
    sentences = select_sentences(load_corpus(corpus).sentences, loaded.tokenizer, None, args.tokens, None, 0)
    n_tokens = sum(len(s) for s in sentences)
    steps: list[dict[str, float]] = []

    def timed_extract(repeat: int) -> tuple[float, float, float]:
        """(the extract's seconds, its CPU seconds, a warm load of the model's seconds just before it); its steps'
        seconds into ``steps``."""
        load_start = time.perf_counter()
        load_model(args.model, device=args.device)
        load = time.perf_counter() - load_start
        cpu = time.process_time()
        result = extract_run(args.model, corpus, scratch / f"run{repeat}", max_tokens=args.tokens, dtype=args.dtype,
                             batch_size=args.batch_size, device=args.device)
        steps.append(result.steps)
        return result.seconds, time.process_time() - cpu, load

    def timed_bare() -> tuple[float, float]:
        cpu = time.process_time()
        return bare_forward_seconds(loaded, sentences, args.batch_size, args.dtype), time.process_time() - cpu

    # one untimed pass first: torch's first forward pass warms its kernels and allocator (4x a later one here),
    # which would land in whichever side ran first; the first sentences and the longest batch do it (not all 100,000)
    warm_up = [s for s, before in zip(sentences, np.cumsum([0] + [len(s) for s in sentences])) if before < WARM_UP_TOKENS]
    warm_up += sorted(sentences, key=len)[-args.batch_size:]
    bare_forward_seconds(loaded, warm_up, args.batch_size, args.dtype)
    pairs = []
    for repeat in range(args.repeats):
        load_before = os.getloadavg()[0]
        if repeat % 2:
            (full_s, full_cpu, load_s), (bare_s, bare_cpu) = timed_extract(repeat), timed_bare()
        else:
            (bare_s, bare_cpu), (full_s, full_cpu, load_s) = timed_bare(), timed_extract(repeat)
        pairs.append({"order": "extract first" if repeat % 2 else "bare first", "bare_s": round(bare_s, 2),
                      "extract_s": round(full_s, 2), "warm_model_load_s": round(load_s, 2),
                      "ratio": round(full_s / bare_s, 3), "cpu_ratio": round(full_cpu / bare_cpu, 3),
                      "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]})
        print(f"pair {repeat + 1} ({pairs[-1]['order']}): bare {bare_s:.2f} s, extract {full_s:.2f} s, ratio "
              f"{full_s / bare_s:.3f} (CPU {full_cpu / bare_cpu:.3f}), load {load_before:.1f}-{os.getloadavg()[0]:.1f}")
    bare = [pair["bare_s"] for pair in pairs]
    full = [pair["extract_s"] for pair in pairs]
    loads = [pair["warm_model_load_s"] for pair in pairs]
    ratios = [f / b for f, b in zip(full, bare)]
    unloaded = [(f - load) / b for f, load, b in zip(full, loads, bare)]
    print(f"tokens per run: {n_tokens} ({len(sentences)} sentences); bare forward: median "
          f"{statistics.median(bare):.2f} s ({n_tokens / statistics.median(bare):,.0f} tok/s); qkviz extract: median "
          f"{statistics.median(full):.2f} s; ratio median {statistics.median(ratios):.2f} (without its pair's warm "
          f"model load: {statistics.median(unloaded):.2f})")
    step_medians = {step: round(statistics.median(run[step] for run in steps), 3) for step in steps[0]}
    print("the extract's steps, medians: " + ", ".join(f"{step} {spent:.2f} s" for step, spent in step_medians.items()))
    return dict(tokens=n_tokens, sentences=len(sentences), bare_forward_s=summary(bare, 2), extract_s=summary(full, 2),
                warm_model_load_s=summary(loads, 2), ratio=summary(ratios, 2),
                ratio_without_model_load=summary(unloaded, 2),
                cpu_ratio=summary([pair["cpu_ratio"] for pair in pairs], 2), steps_s=step_medians, pairs=pairs)


def child_extract(args, corpus: Path, out: Path) -> dict:
    """``qkviz extract`` of ``--rss-tokens`` tokens in a child process: its tokens, wall seconds, its own peak RSS and
    the run's size."""
    child = run_measured([sys.executable, "-m", "qkviz", "-q", "extract", "--model", args.model, "--corpus",
                          str(corpus), "--out", str(out), "--max-tokens", str(args.rss_tokens), "--dtype",
                          args.dtype, "--device", args.device])
    if child["returncode"] != 0:
        raise SystemExit(f"qkviz extract failed with exit status {child['returncode']}")
    run = qkviz.open_run(out)
    size_mb = sum(f.stat().st_size for f in out.iterdir()) / 2**20
    print(f"{run.n_tokens} tokens in a child process: {child['seconds']:.1f} s wall, its peak RSS "
          f"{child['peak_mb']:,.0f} MB, run directory {size_mb:,.0f} MB")
    return {"tokens": run.n_tokens, "seconds": round(child["seconds"], 1), "peak_mb": round(child["peak_mb"]),
            "run_mb": round(size_mb)}


if __name__ == "__main__":
    main()
