"""Image extraction benchmark: images per second, extraction over a bare forward pass, run size.

    python -m bench.extract_images [--repeats 3] [--crops 2] [--batch-size 16] [--dtype float16]
                                   [--out bench/results/extract_images.json]

A ViT-B/16 at 224 x 224 pixels (12 layers x 12 heads, d_head 64, 197 tokens an image: the architecture of
google/vit-base-patch16-224, with random weights: none installs offline) over scikit-image's sample
images and their crops. The ratio is the wall time of ``qkviz.extract`` on the model object (preparing the
images, capturing, writing the vectors and the patch thumbnails, the manifest; hashing the weights
included) over a bare forward pass of the same batches with the same image processor, measured alternately
in one process, each pair in the other order than the one before; min / median / max of ``--repeats`` pairs.
Writes ``bench/results/extract_images.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import transformers

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import qkviz  # noqa: E402
from bench.harness import Recorder, smoke_arguments, summary  # noqa: E402
from bench.figures.results import Results, figure, source, span  # noqa: E402


#: ViT-B/16's shape, and a tiny one for the smoke run
SHAPES = {"ViT-B/16": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                           image_size=224, patch_size=16),
          "tiny ViT": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           image_size=32, patch_size=8)}


def vit_base(shape: str = "ViT-B/16") -> tuple[transformers.PreTrainedModel, object]:
    config = transformers.ViTConfig(**SHAPES[shape])
    size = SHAPES[shape]["image_size"]
    torch.manual_seed(0)
    model = transformers.ViTModel(config, add_pooling_layer=False).eval()
    model.set_attn_implementation("sdpa")     # what extraction runs (it captures, then calls SDPA)
    return model, transformers.ViTImageProcessor(size={"height": size, "width": size})


def bare_forward_seconds(model, processor, images, batch_size: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for first in range(0, len(images), batch_size):
            batch = [images.image(i) for i in range(first, min(first + batch_size, len(images)))]
            model(pixel_values=processor(images=batch, return_tensors="pt")["pixel_values"])
    return time.perf_counter() - start


def timed_extract(model, processor, images, out: Path, args) -> tuple[object, float]:
    start = time.perf_counter()
    run = qkviz.extract(model, images, out, processor=processor, dtype=args.dtype, batch_size=args.batch_size,
                        progress=False)
    return run, time.perf_counter() - start


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--crops", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", type=Path, help="the result file (default bench/results/extract_images.json)")
    parser.add_argument("--shape", choices=list(SHAPES), default="ViT-B/16")
    args = smoke_arguments(parser, argv, out='out', repeats=1, crops=1, batch_size=2, dtype='float32', shape="tiny ViT")
    recorder = Recorder("extract_images", vars(args), out=args.out)
    model, processor = vit_base(args.shape)
    images = qkviz.sample_images(crops=args.crops)
    print(f"torch threads: {torch.get_num_threads()}, {args.shape} (random weights), {len(images)} images, "
          f"stored {args.dtype}, batch {args.batch_size}")
    bare, full = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(args.repeats):
            if repeat % 2:   # each pair in the other order than the one before
                run, seconds = timed_extract(model, processor, images, Path(scratch) / f"run{repeat}", args)
                full.append(seconds)
                bare.append(bare_forward_seconds(model, processor, images, args.batch_size))
            else:
                bare.append(bare_forward_seconds(model, processor, images, args.batch_size))
                run, seconds = timed_extract(model, processor, images, Path(scratch) / f"run{repeat}", args)
                full.append(seconds)
        size_mb = sum(f.stat().st_size for f in run.path.iterdir() if f.is_file()) / 2**20
        patches_mb = (run.path / "patches.npy").stat().st_size / 2**20
    bare_s, full_s = statistics.median(bare), statistics.median(full)
    print(f"{run.n_sentences} images, {run.n_tokens} tokens")
    print(f"bare forward: median {bare_s:.2f} s ({len(images) / bare_s:.1f} images/s)")
    print(f"qkviz extract: median {full_s:.2f} s ({len(images) / full_s:.1f} images/s, {run.n_tokens / full_s:,.0f} tok/s)")
    ratios = [f / b for f, b in zip(full, bare)]
    print(f"ratio extract / bare forward: median {statistics.median(ratios):.2f}; pairs {[round(r, 2) for r in ratios]}")
    print(f"run directory {size_mb:.1f} MB, of which patch thumbnails {patches_mb:.2f} MB")
    shape = SHAPES[args.shape]
    written = recorder.write(model=f"{args.shape}, random weights", layers=shape["num_hidden_layers"],
                             heads=shape["num_attention_heads"],
                             head_dim=shape["hidden_size"] // shape["num_attention_heads"], images=len(images),
                             tokens=run.n_tokens, bare_seconds=summary(bare), extract_seconds=summary(full),
                             ratio=summary(ratios), run_mb=size_mb, patches_mb=patches_mb)
    print(f"wrote {written}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

@figure("extract-images")
def extract_images(results: Results) -> str:
    result = results("extract_images")
    bare, full, images = result["bare_seconds"], result["extract_seconds"], result["images"]
    arguments = result["arguments"]
    return (f"{result['model']}: {result['layers']} layers × {result['heads']} heads, d_head {result['head_dim']}, "
            f"{images} images, {result['tokens']:,} tokens ({result['tokens'] // images} an image), "
            f"{arguments['dtype']} storage, batch {arguments['batch_size']}.\n\n"
            f"| min / median / max of {full['runs']} pairs | |\n|---|---|\n"
            f"| bare forward pass | {span(bare, 2)} ({images / bare['median']:.1f} images/s) |\n"
            f"| `qkviz.extract` (processing, capture, vectors, patch thumbnails, weight hash, manifest) | "
            f"{span(full, 2)} ({images / full['median']:.1f} images/s, {result['tokens'] / full['median']:,.0f} tokens/s) |\n"
            f"| extract / bare forward | {span(result['ratio'], 2, '')} |\n"
            f"| run directory | {result['run_mb']:.0f} MB, of which patch thumbnails {result['patches_mb']:.1f} MB |\n\n"
            f"`bench/extract_images.py --repeats {arguments['repeats']}` ({source(results, 'extract_images')}).\n")


if __name__ == "__main__":
    main()
