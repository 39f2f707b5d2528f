"""Extraction of one document as long as the model's context: wall time and peak memory beyond the weights.

    python -m bench.long_inputs [--dir /tmp/qkviz-long] [--tokens 8192] [--dtypes float32,float16]
                                [--chunk-tokens 0] [--json bench/results/long_inputs.json]

* **The model**: ``bench.modern_model``'s random Llama-shaped decoder, 32 layers x 32 query heads over 8 key-value
  heads, head size 8, a context of ``--context`` tokens (8,192).
* **The document**: one line of ``data/classics.txt`` text of exactly ``--tokens`` tokens (its ``<bos>`` included),
  so that it fills the context without truncation.
* **Measured**: ``qkviz extract`` on it in a child process, once per stored dtype; its wall seconds and the peak of
  its process tree's summed resident memory (psutil, every 0.1 s, as ``bench.scale``), less the size of the
  model's weights file. Goal (issue 28): the weights plus at most 2 GB.
* With ``--chunk-tokens N`` (e.g. 20000), also a document of N tokens split with ``--chunk`` at the context: the
  windows are batched together, padded (the last window is shorter).

The machine is shared: the JSON records the load average before and after each measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
REPO = Path(__file__).resolve().parent.parent

from bench import scale  # noqa: E402
from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.modern_model import CLASSICS, make_model  # noqa: E402
from bench.figures.goals import Goal, verdict  # noqa: E402
from bench.figures.results import Results, figure, minutes, source  # noqa: E402

GOAL_GB = 2.0


def document_of(tokenizer, n_tokens: int) -> str:
    """A prefix of ``data/classics.txt`` (lines joined by spaces) that the tokenizer makes ``n_tokens`` long."""
    text = " ".join(line.strip() for line in CLASSICS.read_text(encoding="utf-8").splitlines() if line.strip())
    while len((encoded := tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
               )["input_ids"]) < n_tokens:
        text = f"{text} {text}"
    special = encoded["special_tokens_mask"]
    opening = special.index(0)
    text = text[:encoded["offset_mapping"][opening + n_tokens - sum(special) - 1][1]]
    while len(tokenizer(text)["input_ids"]) > n_tokens:
        text = text[:text.rfind(" ")]
    return text


def measured(command: list[str]) -> dict:
    """``bench.scale``'s :func:`measured` (wall seconds, the process tree's peak memory), with the load average
    before and after: the machine is shared."""
    load_before = os.getloadavg()[0]
    figures = scale.measured(command)
    return {**figures, "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where the model and the runs are made (default /tmp/qkviz-long; "
                        "with --smoke, a temporary directory)")
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("--chunk-tokens", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="default bench/results/long_inputs.json")
    args = smoke_arguments(parser, argv, out="json", tokens=48,
                           context=64, layers=2, heads=4, kv_heads=2, dtypes="float32")
    args.dir = args.dir or (Path(tempfile.mkdtemp(prefix="qkviz-long-")) if args.smoke else Path("/tmp/qkviz-long"))
    recorder = Recorder("long_inputs", vars(args), args.json)
    from transformers import AutoTokenizer

    args.dir.mkdir(parents=True, exist_ok=True)
    model = make_model(args.dir / f"model-{args.layers}x{args.heads}-{args.context}", layers=args.layers,
                       heads=args.heads, kv_heads=args.kv_heads, context=args.context)
    weights_gb = sum(path.stat().st_size for path in model.glob("*.safetensors")) / 2**30
    tokenizer = AutoTokenizer.from_pretrained(model)
    cases = [("whole", args.tokens, [])]
    if args.chunk_tokens:
        cases.append(("chunked", args.chunk_tokens, ["--chunk", str(args.context)]))
    results = []
    for name, n_tokens, options in cases:
        corpus = args.dir / f"document-{n_tokens}.txt"
        corpus.write_text(document_of(tokenizer, n_tokens) + "\n", encoding="utf-8")
        tokens = len(tokenizer(corpus.read_text(encoding="utf-8").strip())["input_ids"])
        for dtype in args.dtypes.split(","):
            out = args.dir / f"run-{name}-{dtype}"
            command = [sys.executable, "-m", "qkviz", "-q", "extract", "--model", str(model), "--corpus", str(corpus),
                       "--out", str(out), "--dtype", dtype, "--overwrite", *options]
            figures = measured(command)
            beyond = figures["peak_gb"] - weights_gb
            results.append({"case": name, "document_tokens": tokens, "dtype": dtype, "options": options, **figures,
                            "beyond_weights_gb": round(beyond, 3), "goal_met": beyond <= GOAL_GB})
            print(json.dumps(results[-1]), flush=True)
    shape = {"layers": args.layers, "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": 8, "context": args.context,
             "weights_gb": round(weights_gb, 3)}
    written = recorder.write(model=shape, goal=f"peak of the process tree <= the weights + {GOAL_GB} GB", results=results)
    print(f"wrote {written}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: extracting one 8,192-token document (issue 28): memory beyond the weights, for each stored dtype
BEYOND_WEIGHTS_GB = 2.0

def beyond_weights(dtype: str) -> Goal:
    return Goal(f"extracting one 8,192-token document stored as {dtype}, memory beyond the weights",
                BEYOND_WEIGHTS_GB, "GB", True, "long_inputs", "the process tree's peak less the weights",
                lambda found: next((row["beyond_weights_gb"] for row in found["results"] if row["dtype"] == dtype), None),
                2)

def load_range(loads: list[float]) -> str:
    low, high = f"{min(loads):.0f}", f"{max(loads):.0f}"
    return low if low == high else f"{low}–{high}"

@figure("long-inputs")
def long_inputs(results: Results) -> str:
    result = results("long_inputs")
    model = result["model"]
    rows = "\n".join(
        f"| {row['dtype']} | {minutes(row['seconds'])} (load {load_range(row['load_average'])}) "
        f"| {row['peak_gb']:.2f} GB | {row['beyond_weights_gb']:.2f} GB | {verdict(beyond_weights(row['dtype']), results)} |"
        for row in result["results"])
    tokens = result["results"][0]["document_tokens"]
    return (f"A model of {model['layers']} layers × {model['heads']} query heads over {model['kv_heads']} key-value "
            f"heads (head size {model['head_dim']}, context {model['context']:,}; weights {model['weights_gb']:.2f} GB), "
            f"one document of {tokens:,} tokens:\n\n"
            f"| stored dtype | wall | peak RSS | beyond the weights | goal (issue 28): memory beyond the weights |\n"
            f"|---|---|---|---|---|\n{rows}\n\n"
            f"`bench/long_inputs.py` ({source(results, 'long_inputs')}).\n")


if __name__ == "__main__":
    main()
