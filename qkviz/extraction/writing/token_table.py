"""The token and sentence tables of a run, built from the selected sentences."""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.extraction.inputs.selection import TokenizedSentence


def token_table(sentences: list[TokenizedSentence], tokenizer) -> pd.DataFrame:
    """One row per token in storage order (sentence, then position); see ``qkviz.store.run.TOKEN_COLUMNS``.

    ``token`` is the text the token covers in its sentence (its vocabulary ``piece`` for special
    tokens and for tokens that cover only whitespace); character offsets are -1 for special tokens.
    """
    lengths = [len(sentence) for sentence in sentences]
    # one vocabulary look-up of each distinct id (a token's piece depends on its id alone), and each column built
    # whole: a list of every token's text, a flat array of each number column
    token_ids = [token_id for sentence in sentences for token_id in sentence.token_ids]
    pieces = pieces_of(token_ids, tokenizer)
    special = [flag for sentence in sentences for flag in sentence.special]
    offsets = np.array([pair for sentence in sentences for pair in sentence.offsets], dtype=np.int64).reshape(-1, 2)
    surfaces = ["" if flag else sentence.text[start:end].strip()
                for sentence in sentences for flag, (start, end) in zip(sentence.special, sentence.offsets)]
    is_special = np.array(special, dtype=bool)
    character = np.where(is_special[:, None], -1, offsets)
    frame = pd.DataFrame({
        "sentence": np.repeat(np.arange(len(sentences), dtype=np.int64), lengths),
        "position": np.concatenate([np.arange(length, dtype=np.int64) for length in lengths] or [np.zeros(0, np.int64)]),
        "token": [surface or piece for surface, piece in zip(surfaces, pieces)],
        "piece": pieces,
        "token_id": np.array(token_ids, dtype=np.int64),
        "char_start": character[:, 0],
        "char_end": character[:, 1],
        "is_special": is_special,
        "sentence_chars": np.repeat(np.array([len(sentence.text) for sentence in sentences], dtype=np.int64), lengths),
    })
    for column in ("sentence", "position", "token_id", "char_start", "char_end", "sentence_chars"):
        frame[column] = frame[column].astype(np.int32)
    frame["is_special"] = frame["is_special"].astype(bool)
    return frame


def pieces_of(token_ids: list[int], tokenizer) -> list[str]:
    """Every token's vocabulary piece, in order: ``tokenizer.convert_ids_to_tokens`` of each distinct id once (a run
    of 100,000 tokens holds a few thousand)."""
    distinct, where = np.unique(np.asarray(token_ids, dtype=np.int64), return_inverse=True)
    looked_up = [str(piece) for piece in tokenizer.convert_ids_to_tokens([int(i) for i in distinct])]
    return [looked_up[index] for index in where.reshape(-1).tolist()]


def sentence_table(sentences: list[TokenizedSentence]) -> pd.DataFrame:
    """One row per sentence; ``first_token`` and ``n_tokens`` locate its rows in the token table, ``token_offset``
    and ``char_offset`` a window in its document (see :mod:`qkviz.extraction.inputs.long_documents`; 0 for a whole
    document)."""
    lengths = np.array([len(s) for s in sentences], dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(lengths) else lengths
    return pd.DataFrame({
        "sentence": np.arange(len(sentences), dtype=np.int32),
        "corpus_index": np.array([s.corpus_index for s in sentences], dtype=np.int32),
        "text": [s.text for s in sentences],
        "first_token": first.astype(np.int64),
        "n_tokens": lengths.astype(np.int32),
        "truncated": np.array([s.truncated for s in sentences], dtype=bool),
        "token_offset": np.array([s.token_offset for s in sentences], dtype=np.int64),
        "char_offset": np.array([s.char_offset for s in sentences], dtype=np.int64),
    })
