"""What keeping every head's output norm ``|W_O^h v_j|`` costs an extraction: time with and without, and bytes.

    python -m bench.output_norms [--models minilm,smollm2] [--tokens 2000,1000] [--repeats 3]

Per model, ``--repeats`` pairs of ``extract_run`` over the same tokens of the bundled corpus, one with output
norms (the default) and one with ``output_norms=False``, each pair in the other order than the one before, the
model loaded once (not timed) and passed in, each extraction into a fresh directory; the wall seconds of each
(everything: the identity, the exactness gate, the capture, the writing), their min / median / max, and the
bytes of ``output_norms.npy`` against the run's. On a shared machine the two sides differ by less than the load's
noise, so the computation itself is timed apart too: the factorisation of every layer's output projection, and
every layer's norms from values of the run's shape (``[1, kv_head, tokens, d_value]``, random), min / median of
``--repeats``. ``--json`` (default ``bench/results/output_norms.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from qkviz.extraction import DEFAULT_CORPUS, extract_run, load_model, model_adapter  # noqa: E402
from qkviz.extraction.streaming import head_factors  # noqa: E402
from qkviz.extraction.streaming import head_output_norms  # noqa: E402
from bench.harness import Recorder, smoke_arguments, summary  # noqa: E402
from bench.figures.results import Results, figure, source, span  # noqa: E402

#: what the smoke test adds to ``--smoke`` (``{model}``: a tiny model; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ('--models', '{model}')
NORMS_FILE = "output_norms.npy"


def measure(model: str, tokens: int, repeats: int, dtype: str, scratch: Path) -> dict:
    """One model's pairs: seconds with and without output norms, and the bytes on disk."""
    loaded = load_model(model)

    def extract(norms: bool, name: str):
        return extract_run(loaded.model, DEFAULT_CORPUS, scratch / name, tokenizer=loaded.tokenizer,
                           max_tokens=tokens, dtype=dtype, output_norms=norms)

    extract(True, "warm")                          # the first pass warms torch's kernels and the model's identity
    with_norms, without = [], []
    for repeat in range(repeats):
        order = (True, False) if repeat % 2 == 0 else (False, True)
        for norms in order:
            result = extract(norms, f"{'with' if norms else 'without'}-{repeat}")
            (with_norms if norms else without).append(result.seconds)
    run = extract(True, "with-0").run
    run_bytes = sum(path.stat().st_size for path in Path(run.path).iterdir() if path.is_file())
    norm_bytes = (Path(run.path) / NORMS_FILE).stat().st_size
    overhead = [a / b - 1 for a, b in zip(with_norms, without)]
    factor_s, norms_s = computation_seconds(loaded.model, run.n_tokens, repeats)
    print(f"{model}: {run.n_tokens} tokens, {run.n_layers} x {run.n_heads} heads: with {statistics.median(with_norms):.2f} s, "
          f"without {statistics.median(without):.2f} s (median), {NORMS_FILE} {norm_bytes:,} of {run_bytes:,} bytes")
    return {"tokens": run.n_tokens, "layers": run.n_layers, "heads": run.n_heads, "head_dim": run.head_dim,
            "with_s": summary(with_norms, 3), "without_s": summary(without, 3), "overhead": summary(overhead, 3),
            "norm_bytes": norm_bytes, "run_bytes": run_bytes, "factor_s": summary(factor_s, 4),
            "norms_s": summary(norms_s, 4)}


def computation_seconds(model, tokens: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of factoring every layer's output projection, and of every layer's output norms over ``tokens``."""
    adapter = model_adapter(model)
    shape = adapter.shape(model.config)
    values = torch.randn(1, shape.n_kv_heads, tokens, shape.value_dim or shape.head_dim)
    factor_s, norms_s = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        factors = head_factors(model, adapter, shape)
        factor_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        with torch.inference_mode():
            for layer in range(shape.n_layers):
                head_output_norms(values, factors[layer], shape.n_heads)
        norms_s.append(time.perf_counter() - start)
    return factor_s, norms_s


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="minilm,smollm2")
    parser.add_argument("--tokens", default="2000,1000", help="per model, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", type=Path, help="default: bench/results/output_norms.json")
    args = smoke_arguments(parser, argv, out="json", tokens="300", repeats=1)
    recorder = Recorder("output_norms", vars(args), args.json)
    models = args.models.split(",")
    tokens = [int(count) for count in args.tokens.split(",")]
    tokens += [tokens[-1]] * (len(models) - len(tokens))
    print(f"torch threads: {torch.get_num_threads()}")
    figures = {}
    with tempfile.TemporaryDirectory() as scratch:
        for model, count in zip(models, tokens):
            key = Path(model).name if Path(model).is_dir() else model
            directory = Path(scratch) / key
            directory.mkdir()
            figures[key] = measure(model, count, args.repeats, args.dtype, directory)
    print(recorder.write(models=figures))


@figure("output-norms")
def output_norms_cost(results: Results) -> str:
    found = results("output_norms")["models"]
    rows = []
    for model, r in found.items():
        share = r["norm_bytes"] / r["run_bytes"]
        rows.append(f"| {model} ({r['layers']} x {r['heads']} heads) | {r['tokens']:,} | {span(r['with_s'], 2)} | "
                    f"{span(r['without_s'], 2)} | {span(r['overhead'], 1, '', 0.01)} % | "
                    f"{r['factor_s']['min'] * 1e3:.1f} / {r['factor_s']['median'] * 1e3:.1f} ms, "
                    f"{r['norms_s']['min'] * 1e3:.1f} / {r['norms_s']['median'] * 1e3:.1f} ms | "
                    f"{r['norm_bytes'] / 2**10:,.0f} KiB ({share:.1%} of the run) |")
    header = ("| model | tokens | extraction with output norms (min / median / max) | without | extra time (pairs) | "
              "the norms' own computation: factoring, all layers' norms (min / median) | output_norms.npy |\n"
              "|---|---|---|---|---|---|---|\n")
    return header + "\n".join(rows) + f"\n\n({source(results, 'output_norms')}.)\n"


if __name__ == "__main__":
    main()
