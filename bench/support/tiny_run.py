"""The input of every bench's smoke run: a run of a tiny random model over the first sentences of the bundled
corpus, with its tiny model and corpus beside it (a few seconds to make; ``python -m bench.NAME --smoke``)."""

from __future__ import annotations

from pathlib import Path

import qkviz
from qkviz.extraction import DEFAULT_CORPUS

from bench.support.tiny_models import build_tiny_model


def tiny_corpus(directory: Path, sentences: int = 12) -> Path:
    """The first ``sentences`` lines of the bundled corpus, in ``directory``/sentences.txt."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = DEFAULT_CORPUS.read_text(encoding="utf-8").splitlines()[:sentences]
    path = directory / "sentences.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tiny_model(directory: Path, family: str = "llama", sentences: int = 12) -> Path:
    """A tiny random ``family`` model with its tokenizer, in ``directory``/model (made once)."""
    model = directory / f"model-{family}"
    if not (model / "config.json").exists():
        corpus = tiny_corpus(directory, sentences)
        build_tiny_model(family, model, corpus.read_text(encoding="utf-8").splitlines(), seed=0)
    return model


def tiny_run(directory: Path, family: str = "llama", sentences: int = 12) -> Path:
    """A run of a tiny random ``family`` model over ``sentences`` sentences, in ``directory``/run (made once)."""
    path = directory / f"run-{family}"
    if not path.exists():
        model = tiny_model(directory, family, sentences)
        qkviz.extract(str(model), tiny_corpus(directory, sentences), path, max_sentences=sentences)
    return path
