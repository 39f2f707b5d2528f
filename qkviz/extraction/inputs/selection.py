"""Choosing and tokenizing the sentences of a run.

Sentences are drawn in an order shuffled by ``seed`` until ``max_sentences`` or ``max_tokens``
would be exceeded, then kept in corpus order. Each sentence is its own sequence with the special
tokens its tokenizer adds; a sentence longer than ``max_length`` tokens is truncated (the
tokenizer keeps its closing special tokens) and counted. Without ``max_length``, each tokenized sentence
(a document) goes through a rule (:mod:`qkviz.extraction.inputs.long_documents`): split into windows, each its own
sequence, or refused when longer than the model's context. A document's windows are drawn together, in
order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

logger = logging.getLogger(__name__)

TOKENIZE_BATCH = 256


@dataclass(frozen=True)
class TokenizedSentence:
    corpus_index: int
    text: str
    token_ids: tuple[int, ...]
    offsets: tuple[tuple[int, int], ...]
    special: tuple[bool, ...]
    truncated: bool
    token_offset: int = 0    # a window's first text token among its document's text tokens
    char_offset: int = 0     # where a window's text starts in its document

    def __len__(self) -> int:
        return len(self.token_ids)


def select_sentences(sentences: tuple[str, ...], tokenizer, max_length: int | None,
                     max_tokens: int | None, max_sentences: int | None, seed: int,
                     rule: Callable[[TokenizedSentence], list[TokenizedSentence]] = lambda document: [document],
                     ) -> list[TokenizedSentence]:
    """Tokenize and select sentences as described in the module docstring (``rule``: what becomes of each
    document that ``max_length`` did not truncate)."""
    order = np.random.default_rng(seed).permutation(len(sentences))
    chosen: list[TokenizedSentence] = []
    total_tokens = 0
    for start in range(0, len(order), TOKENIZE_BATCH):
        batch = [int(i) for i in order[start:start + TOKENIZE_BATCH]]
        for document in _tokenize(batch, sentences, tokenizer, max_length):
            for tokenized in (rule(document) if max_length is None else [document]):
                if max_sentences is not None and len(chosen) >= max_sentences:
                    return _in_corpus_order(chosen)
                if max_tokens is not None and total_tokens + len(tokenized) > max_tokens:
                    return _in_corpus_order(chosen)
                chosen.append(tokenized)
                total_tokens += len(tokenized)
    return _in_corpus_order(chosen)


def _in_corpus_order(chosen: list[TokenizedSentence]) -> list[TokenizedSentence]:
    return sorted(chosen, key=lambda s: (s.corpus_index, s.token_offset))


def _tokenize(indices: list[int], sentences: tuple[str, ...], tokenizer, max_length: int | None):
    texts = [sentences[i] for i in indices]
    encoded = _encode(tokenizer, texts, truncation=False, max_length=None)
    too_long = [j for j, ids in enumerate(encoded["input_ids"]) if max_length is not None and len(ids) > max_length]
    if too_long:
        shortened = _encode(tokenizer, [texts[j] for j in too_long], truncation=True, max_length=max_length)
        for key in encoded:
            for position, j in enumerate(too_long):
                encoded[key][j] = shortened[key][position]
    too_long_set = set(too_long)
    for j, index in enumerate(indices):
        yield TokenizedSentence(
            corpus_index=index,
            text=texts[j],
            token_ids=tuple(int(t) for t in encoded["input_ids"][j]),
            offsets=tuple((int(a), int(b)) for a, b in encoded["offset_mapping"][j]),
            special=tuple(bool(s) for s in encoded["special_tokens_mask"][j]),
            truncated=j in too_long_set,
        )


def _encode(tokenizer, texts: list[str], truncation: bool, max_length: int | None) -> dict:
    # verbose=False: no "longer than the specified maximum sequence length" warning; what becomes of a long
    # document is decided here (truncated, windows or refused), never left to the model
    encoded = tokenizer(texts, add_special_tokens=True, truncation=truncation, max_length=max_length,
                        return_offsets_mapping=True, return_special_tokens_mask=True, return_attention_mask=False,
                        verbose=False)
    return {key: list(encoded[key]) for key in ("input_ids", "offset_mapping", "special_tokens_mask")}
