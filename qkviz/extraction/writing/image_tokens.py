"""The token and image tables of an image run, and choosing its images.

An image run keeps the text run's tables, so every view, statistic and search reads it the same way:
an image is a "sentence" (its ``text`` is the image's id: a file's path in the corpus, or ``image N`` in
memory) and each of its tokens a row. Image runs add ``patch_row`` and ``patch_col`` (``-1`` for the
special tokens) to the token table and the class ``label`` to the image table; a token's ``token`` is
``CLS`` / ``DIST`` / ``REGn`` or ``r3 c5``, its ``token_id`` its place in the image's sequence (the same
patch place has the same id in every image), and it covers no characters (offsets ``-1``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.extraction.streaming.image_capture import ImageLayout


def select_images(n_images: int, tokens_per_image: int, max_tokens: int | None, max_sentences: int | None,
                  seed: int) -> np.ndarray:
    """Corpus indices of the images of the run, in corpus order: drawn in an order shuffled by ``seed``
    until ``max_sentences`` images or ``max_tokens`` tokens would be exceeded (as text sentences are)."""
    order = np.random.default_rng(seed).permutation(n_images)
    count = n_images
    if max_sentences is not None:
        count = min(count, max_sentences)
    if max_tokens is not None:
        count = min(count, max_tokens // tokens_per_image)
    return np.sort(order[:count])


def image_token_table(n_images: int, layout: ImageLayout) -> pd.DataFrame:
    """One row per token in storage order (image, then its sequence): the text run's columns plus
    ``patch_row`` and ``patch_col``."""
    prefix = len(layout.prefix)
    rows = np.concatenate([np.full(prefix, -1), np.repeat(np.arange(layout.rows), layout.cols)])
    cols = np.concatenate([np.full(prefix, -1), np.tile(np.arange(layout.cols), layout.rows)])
    names = [*layout.prefix, *(f"r{row} c{col}" for row, col in zip(rows[prefix:], cols[prefix:]))]
    positions = np.arange(layout.n_tokens, dtype=np.int32)
    frame = pd.DataFrame({
        "sentence": np.repeat(np.arange(n_images, dtype=np.int32), layout.n_tokens),
        "position": np.tile(positions, n_images),
        "token": names * n_images,
        "piece": names * n_images,
        "token_id": np.tile(positions, n_images),
        "char_start": np.full(n_images * layout.n_tokens, -1, dtype=np.int32),
        "char_end": np.full(n_images * layout.n_tokens, -1, dtype=np.int32),
        "is_special": np.tile(positions < prefix, n_images),
        "sentence_chars": np.zeros(n_images * layout.n_tokens, dtype=np.int32),
        "patch_row": np.tile(rows, n_images).astype(np.int16),
        "patch_col": np.tile(cols, n_images).astype(np.int16),
    })
    return frame


def image_table(ids: list[str], labels: list[str | None], corpus_indices: np.ndarray,
                layout: ImageLayout) -> pd.DataFrame:
    """One row per image, as the text run's sentence table (``text`` the image's id) plus ``label``."""
    n_images = len(ids)
    return pd.DataFrame({
        "sentence": np.arange(n_images, dtype=np.int32),
        "corpus_index": np.asarray(corpus_indices, dtype=np.int32),
        "text": list(ids),
        "first_token": np.arange(n_images, dtype=np.int64) * layout.n_tokens,
        "n_tokens": np.full(n_images, layout.n_tokens, dtype=np.int32),
        "truncated": np.zeros(n_images, dtype=bool),
        "token_offset": np.zeros(n_images, dtype=np.int64),
        "char_offset": np.zeros(n_images, dtype=np.int64),
        "label": [label or "" for label in labels],
    })
