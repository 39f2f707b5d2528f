"""Exactness table: max |attention recomputed from the run - the model's own eager attention|.

    python -m bench.exactness [--real-sentences 24]   # writes bench/results/exactness.json

Every tiny family (random weights, 24 sentences; image families: the 40 scikit-image sample images and
crops) and both bundled models on the default corpus
(all sentences extracted; the comparison batch is ``--real-sentences`` of them spread over the
corpus), in float32 and float16 storage. The tests assert the same bounds (1e-5, 2e-3).
``bench/results/exactness.json`` (``--json`` elsewhere) holds one row per model: its name, what was compared
(sentences, images or tokens) and the two errors; ``python -m bench.figures`` writes docs/models.md's table from it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import qkviz  # noqa: E402

from bench.harness import Recorder, smoke_arguments  # noqa: E402
from bench.figures.results import BUNDLED, Results, figure, source  # noqa: E402


def spread(run, count: int) -> list[int]:
    return sorted(set(np.linspace(0, run.n_sentences - 1, count).astype(int).tolist()))


#: what the smoke test adds to ``--smoke`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model,
#: ``{corpus}``: a few sentences; ``bench.support.tiny_run``)
SMOKE_ARGUMENTS = ()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-sentences", type=int, default=24)
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--families", help="comma-separated tiny families to check (default: every text and image one)")
    parser.add_argument("--json", type=Path, help="where the rows go (default bench/results/exactness.json)")
    args = smoke_arguments(parser, argv, out='json', families='llama,vit', skip_real=True)
    # torch and the tiny models, imported here: the figure blocks below import this module without them
    from qkviz.extraction import DEFAULT_CORPUS, load_model
    from qkviz.extraction.streaming import pad_token_id

    from bench.support.attention_check import max_attention_error
    from bench.support.tiny_models import FAMILIES, build_tiny_model
    from bench.support.tiny_vision import VISION_FAMILIES, build_tiny_vision_model, max_image_attention_error
    chosen = set(args.families.split(",")) if args.families else set(FAMILIES) | set(VISION_FAMILIES)
    recorder = Recorder("exactness", vars(args), args.json)
    rows: list[dict] = []
    sentences = DEFAULT_CORPUS.read_text(encoding="utf-8").splitlines()
    print(f"{'model':<22} {'float32':>10} {'float16':>10}")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        corpus = scratch / "tiny.txt"
        corpus.write_text("\n".join(sentences[:40]) + "\n", encoding="utf-8")
        for family in [family for family in FAMILIES if family in chosen]:
            model_dir = build_tiny_model(family, scratch / family, sentences)
            pad = pad_token_id(load_model(str(model_dir)).tokenizer)
            errors = []
            for dtype in ("float32", "float16"):
                run = qkviz.extract(str(model_dir), corpus, scratch / f"{family}-{dtype}", max_sentences=24,
                                    dtype=dtype, batch_size=8)
                errors.append(max_attention_error(run, model_dir, list(range(run.n_sentences)), pad)[0])
            print(f"tiny {family:<17} {errors[0]:>10.1e} {errors[1]:>10.1e}", flush=True)
            rows.append({"model": family, "kind": "tiny text", "compared": f"{run.n_sentences} sentences",
                         "float32": float(errors[0]), "float16": float(errors[1])})
        images = qkviz.sample_images(crops=2)
        for family in [family for family in VISION_FAMILIES if family in chosen]:
            model_dir = build_tiny_vision_model(family, scratch / family)
            errors = []
            for dtype in ("float32", "float16"):
                run = qkviz.extract(str(model_dir), images, scratch / f"{family}-{dtype}", dtype=dtype, batch_size=8,
                                    progress=False)
                errors.append(max_image_attention_error(run, model_dir, family, images)[0])
            print(f"tiny {family:<17} {errors[0]:>10.1e} {errors[1]:>10.1e}  ({run.n_sentences} images)", flush=True)
            rows.append({"model": family, "kind": "tiny image", "compared": f"{run.n_sentences} images",
                         "float32": float(errors[0]), "float16": float(errors[1])})
        if not args.skip_real:
            rows += real_models(scratch, args.real_sentences)
    print(recorder.write(rows=rows))


def real_models(scratch: Path, count: int) -> list[dict]:
    """Both bundled models over the whole default corpus, compared on ``count`` sentences spread over it."""
    from qkviz.extraction import DEFAULT_CORPUS, load_model
    from qkviz.extraction.models import model_directory
    from qkviz.extraction.streaming import pad_token_id

    from bench.support.attention_check import max_attention_error

    rows = []
    for name in ("minilm", "smollm2"):
        pad = pad_token_id(load_model(name).tokenizer)
        errors = []
        for dtype in ("float32", "float16"):
            run = qkviz.extract(name, DEFAULT_CORPUS, scratch / f"{name}-{dtype}", dtype=dtype)
            compared = spread(run, count)
            errors.append(max_attention_error(run, model_directory(name)[0], compared, pad)[0])
        print(f"{name} ({run.n_tokens} tokens) {errors[0]:>8.1e} {errors[1]:>10.1e}", flush=True)
        rows.append({"model": name, "kind": "bundled", "compared": f"{len(compared)} sentences",
                     "tokens": run.n_tokens, "float32": float(errors[0]), "float16": float(errors[1])})
    return rows


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

#: docs/models.md's exactness rows: the families each row groups, as the tables name them
EXACTNESS_GROUPS = ((("bert", "BERT"), ("roberta", "RoBERTa"), ("distilbert", "DistilBERT")),
                    (("gpt2", "GPT-2"), ("llama", "Llama"), ("qwen2", "Qwen2")),
                    (("mistral", "Mistral (window 6)"), ("gemma3", "Gemma 3 (window 5)")),
                    (("vit", "ViT"), ("deit", "DeiT"), ("dinov2", "DINOv2"), ("dinov2-registers", "DINOv2 with registers")),
                    (("clip-vision", "CLIP vision"), ("siglip-vision", "SigLIP vision"), ("clip", "whole CLIP")))

@figure("exactness")
def exactness(results: Results) -> str:
    result = results("exactness")
    by = {row["model"]: row for row in result["rows"]}
    grouped = {model for group in EXACTNESS_GROUPS for model, _ in group}
    groups = [[(model, label) for model, label in group if model in by] for group in EXACTNESS_GROUPS]
    whole = {model for model in BUNDLED if "tokens" in by.get(model, {})}     # a bundled model's real-weights row
    groups += [[(model, model)] for model in by if model not in grouped and model not in whole]
    rows = [("tiny " + " / ".join(label for _, label in group),
             *(" / ".join(f"{by[model][dtype]:.1e}" for model, _ in group) for dtype in ("float32", "float16")))
            for group in groups if group]
    rows += [(f"{BUNDLED[model]}, whole default corpus ({by[model]['tokens']:,} tokens)",
              f"{by[model]['float32']:.1e}", f"{by[model]['float16']:.1e}") for model in BUNDLED if model in whole]
    table = "\n".join(f"| {name} | {f32} | {f16} |" for name, f32, f16 in rows)
    compared = {row["kind"]: row["compared"] for row in result["rows"]}
    worst = {dtype: max(result["rows"], key=lambda row: row[dtype]) for dtype in ("float32", "float16")}
    return (f"| model | float32 storage | float16 storage |\n|---|---|---|\n{table}\n\n"
            f"Compared: tiny text models on {compared.get('tiny text', 'no')} in one padded batch, tiny image models "
            f"on {compared.get('tiny image', 'no')}, the bundled models on {compared.get('bundled', 'no')} spread over "
            f"the corpus. Largest: {worst['float32']['float32']:.1e} ({worst['float32']['model']}) in float32, "
            f"{worst['float16']['float16']:.1e} ({worst['float16']['model']}) in float16. `bench/exactness.py` "
            f"({source(results, 'exactness')}).\n")


if __name__ == "__main__":
    main()
