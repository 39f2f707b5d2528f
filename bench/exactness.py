"""Exactness table: max |attention recomputed from the run - the model's own eager attention|.

    python bench/exactness.py [--real-sentences 24]

Every tiny family (random weights, 24 sentences; image families: the 40 scikit-image sample images and
crops) and both bundled models on the default corpus
(all sentences extracted; the comparison batch is ``--real-sentences`` of them spread over the
corpus), in float32 and float16 storage. The tests assert the same bounds (1e-5, 2e-3).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import qkviz  # noqa: E402
from support.attention_check import max_attention_error  # noqa: E402
from qkviz.extraction.corpus import DEFAULT_CORPUS  # noqa: E402
from qkviz.extraction.text_capture import pad_token_id  # noqa: E402
from qkviz.extraction.models import load_model, model_directory  # noqa: E402
from support.tiny_models import FAMILIES, build_tiny_model  # noqa: E402
from support.tiny_vision import VISION_FAMILIES, build_tiny_vision_model, max_image_attention_error  # noqa: E402


def spread(run, count: int) -> list[int]:
    return sorted(set(np.linspace(0, run.n_sentences - 1, count).astype(int).tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-sentences", type=int, default=24)
    parser.add_argument("--skip-real", action="store_true")
    args = parser.parse_args()
    sentences = DEFAULT_CORPUS.read_text(encoding="utf-8").splitlines()
    print(f"{'model':<22} {'float32':>10} {'float16':>10}")
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        corpus = scratch / "tiny.txt"
        corpus.write_text("\n".join(sentences[:40]) + "\n", encoding="utf-8")
        for family in FAMILIES:
            model_dir = build_tiny_model(family, scratch / family, sentences)
            pad = pad_token_id(load_model(str(model_dir)).tokenizer)
            errors = []
            for dtype in ("float32", "float16"):
                run = qkviz.extract(str(model_dir), corpus, scratch / f"{family}-{dtype}", max_sentences=24,
                                    dtype=dtype, batch_size=8)
                errors.append(max_attention_error(run, model_dir, list(range(run.n_sentences)), pad)[0])
            print(f"tiny {family:<17} {errors[0]:>10.1e} {errors[1]:>10.1e}", flush=True)
        images = qkviz.sample_images(crops=2)
        for family in VISION_FAMILIES:
            model_dir = build_tiny_vision_model(family, scratch / family)
            errors = []
            for dtype in ("float32", "float16"):
                run = qkviz.extract(str(model_dir), images, scratch / f"{family}-{dtype}", dtype=dtype, batch_size=8,
                                    progress=False)
                errors.append(max_image_attention_error(run, model_dir, family, images)[0])
            print(f"tiny {family:<17} {errors[0]:>10.1e} {errors[1]:>10.1e}  ({run.n_sentences} images)", flush=True)
        if args.skip_real:
            return
        for name in ("minilm", "smollm2"):
            pad = pad_token_id(load_model(name).tokenizer)
            errors = []
            for dtype in ("float32", "float16"):
                run = qkviz.extract(name, DEFAULT_CORPUS, scratch / f"{name}-{dtype}", dtype=dtype)
                errors.append(max_attention_error(run, model_directory(name)[0],
                                                  spread(run, args.real_sentences), pad)[0])
            print(f"{name} ({run.n_tokens} tokens) {errors[0]:>8.1e} {errors[1]:>10.1e}", flush=True)


if __name__ == "__main__":
    main()
