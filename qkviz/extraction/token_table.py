"""The token and sentence tables of a run, built from the selected sentences."""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.extraction.selection import TokenizedSentence


def token_table(sentences: list[TokenizedSentence], tokenizer) -> pd.DataFrame:
    """One row per token in storage order (sentence, then position); see ``qkviz.store.run.TOKEN_COLUMNS``.

    ``token`` is the text the token covers in its sentence (its vocabulary ``piece`` for special
    tokens and for tokens that cover only whitespace); character offsets are -1 for special tokens.
    """
    rows: dict[str, list] = {name: [] for name in
                             ("sentence", "position", "token", "piece", "token_id", "char_start", "char_end",
                              "is_special", "sentence_chars")}
    for sentence_number, sentence in enumerate(sentences):
        pieces = tokenizer.convert_ids_to_tokens(list(sentence.token_ids))
        for position, (token_id, (start, end), special, piece) in enumerate(
                zip(sentence.token_ids, sentence.offsets, sentence.special, pieces)):
            surface = "" if special else sentence.text[start:end].strip()
            rows["sentence"].append(sentence_number)
            rows["position"].append(position)
            rows["token"].append(surface or str(piece))
            rows["piece"].append(str(piece))
            rows["token_id"].append(token_id)
            rows["char_start"].append(-1 if special else start)
            rows["char_end"].append(-1 if special else end)
            rows["is_special"].append(special)
            rows["sentence_chars"].append(len(sentence.text))
    frame = pd.DataFrame(rows)
    for column in ("sentence", "position", "token_id", "char_start", "char_end", "sentence_chars"):
        frame[column] = frame[column].astype(np.int32)
    frame["is_special"] = frame["is_special"].astype(bool)
    return frame


def sentence_table(sentences: list[TokenizedSentence]) -> pd.DataFrame:
    """One row per sentence; ``first_token`` and ``n_tokens`` locate its rows in the token table, ``token_offset``
    and ``char_offset`` a window in its document (see :mod:`qkviz.extraction.long_documents`; 0 for a whole
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
