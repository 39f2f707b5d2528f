"""Extraction benchmark: tokens per second, extraction time over a bare forward pass, peak memory.

    python bench/extract.py [--model minilm] [--tokens 10000] [--repeats 3] [--rss-tokens 100000]

* ratio: wall time of ``qkviz.extract`` (tokenizing, capturing, writing, manifest; the model is
  loaded and hashed inside it, reported apart) over a bare forward pass of the same model over the
  same batches, measured alternately in one process; the median of ``--repeats`` pairs.
* peak RSS: ``qkviz extract`` of ``--rss-tokens`` tokens in a child process (``ru_maxrss``).
The corpus is the bundled one, repeated as often as needed to reach the token counts.
"""

from __future__ import annotations

import argparse
import os
import resource
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
sys.path.insert(0, str(REPO))

import qkviz  # noqa: E402
from qkviz.extraction import extract_run  # noqa: E402
from qkviz.extraction.adapters import model_adapter  # noqa: E402
from qkviz.extraction.corpus import DEFAULT_CORPUS, load_corpus  # noqa: E402
from qkviz.extraction.text_capture import CHUNK_BYTES, bytes_per_token, chunk_sentences, pad_token_id, padded_batch  # noqa: E402
from qkviz.extraction.models import load_model  # noqa: E402
from qkviz.extraction.selection import select_sentences  # noqa: E402


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rss-tokens", type=int, default=100_000, help="0 skips the memory run")
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}, model {args.model}, device {args.device}, dtype {args.dtype}")

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        copies = max(1, -(-max(args.tokens, args.rss_tokens) // 11_000) + 1)
        corpus = repeated_corpus(scratch, copies)
        load_start = time.perf_counter()
        loaded = load_model(args.model, device=args.device)
        load_seconds = time.perf_counter() - load_start
        sentences = select_sentences(load_corpus(corpus).sentences, loaded.tokenizer, None, args.tokens, None, 0)
        n_tokens = sum(len(s) for s in sentences)

        bare, full = [], []
        for repeat in range(args.repeats):
            bare.append(bare_forward_seconds(loaded, sentences, args.batch_size, args.dtype))
            result = extract_run(args.model, corpus, scratch / f"run{repeat}", max_tokens=args.tokens,
                                 dtype=args.dtype, batch_size=args.batch_size, device=args.device)
            full.append(result.seconds)
        bare_s, full_s = statistics.median(bare), statistics.median(full)
        print(f"tokens per run: {n_tokens} ({len(sentences)} sentences)")
        print(f"bare forward: median {bare_s:.2f} s ({n_tokens / bare_s:,.0f} tok/s)")
        print(f"qkviz extract: median {full_s:.2f} s ({n_tokens / full_s:,.0f} tok/s), "
              f"of which loading the model (done again inside extract) about {load_seconds:.2f} s")
        ratios = [f / b for f, b in zip(full, bare)]
        print(f"ratio extract / bare forward: median {statistics.median(ratios):.2f} "
              f"(without model load: {(full_s - load_seconds) / bare_s:.2f}); pairs {[round(r, 2) for r in ratios]}")

        if args.rss_tokens:
            out = scratch / "rss-run"
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "qkviz", "-q", "extract", "--model", args.model, "--corpus",
                            str(corpus), "--out", str(out), "--max-tokens", str(args.rss_tokens), "--dtype",
                            args.dtype, "--device", args.device], check=True)
            seconds = time.perf_counter() - start
            peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
            run = qkviz.open_run(out)
            size_mb = sum(f.stat().st_size for f in out.iterdir()) / 2**20
            print(f"{run.n_tokens} tokens in a child process: {seconds:.1f} s wall, peak RSS {peak_mb:,.0f} MB, "
                  f"run directory {size_mb:,.0f} MB")


if __name__ == "__main__":
    main()
