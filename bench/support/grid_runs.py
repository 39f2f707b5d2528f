"""Runs of the head grids real models have (6 x 12, 12 x 12, 30 x 9, 32 x 32), over a few sentences: a random
Llama-shaped model of each grid (``bench.modern_model``, head size 8, a small vocabulary) and every head's PCA
2D layout, for the matrix view's tests and benchmark. A few hundred tokens each: extraction takes seconds."""

from __future__ import annotations

from pathlib import Path

import qkviz

#: ``name -> (layers, heads, key-value heads)``: BERT-base / MiniLM's 6 x 12 and 12 x 12, SmolLM2-135M's 30 x 9
#: over 3, Llama-3-8B's 32 x 32 over 8
GRIDS = {"6x12": (6, 12, 12), "12x12": (12, 12, 4), "30x9": (30, 9, 3), "32x32": (32, 32, 8)}


def grid_model(directory: Path, layers: int, heads: int, kv_heads: int) -> Path:
    """The random model of one grid in ``directory`` (kept if already there)."""
    from bench.modern_model import make_model

    return make_model(Path(directory), layers=layers, heads=heads, kv_heads=kv_heads, head_dim=8, context=512,
                      vocab=300)


def grid_run(directory: Path, name: str, corpus: Path, max_sentences: int = 4):
    """The run of grid ``name`` (:data:`GRIDS`) over the first ``max_sentences`` of ``corpus``, with PCA 2D layouts."""
    directory = Path(directory)
    model = grid_model(directory / f"model-{name}", *GRIDS[name])
    run = qkviz.extract(str(model), corpus, directory / f"run-{name}", max_sentences=max_sentences)
    qkviz.project(run, methods=["pca"], dims=[2], progress=False)
    return run
