"""What every head writes, measured on the repeated-random-tokens probe: does attending to a token raise that token's
logit (copying) or lower it (suppression)?

The probe is the one the induction labels are measured on (:mod:`qkviz.probes.repeat_probe`, the same sequences).
The model runs once per sequence under qkviz's trace (:mod:`qkviz.extraction.residual.own_token_writes`): each head's
write from every source token ``j`` (``a_ij W_O^h v_j``, through the frozen norms to the unembedding) is read on a
set of candidate tokens ``C``: the probe's own tokens, then the corpus's most frequent ones, then seeded random ids
of the vocabulary, :attr:`CopyingSettings.candidates` in all. With ``rank_j`` the place of ``j``'s own token among
the candidates in the write from ``j``:

* ``copying``: the mean over the second copy's queries of ``sum_j a_ij [rank_j < top]``: the share of a query's
  attention that goes to tokens the head writes into its own top ``top`` of the candidates. A head attending
  uniformly to tokens whose writes rank candidates at random scores ``top / |C|`` (its chance), whatever it attends.
* ``suppression``: the same with the bottom ``top`` (negative copying, as in copy-suppression heads).
* the same two with each source's own token replaced by another candidate (a seeded permutation of the candidates:
  the targets shuffled), the control: they should stay near chance.
* ``copying-corpus``, ``suppression-corpus`` (and their ``-shuffled`` controls, ``attended-logit-raise-corpus``): the
  same scores on what the head does on the run's own text, at the corpus's repeats: the queries whose token and the
  one before it occurred earlier in their sequence (:func:`qkviz.analysis.statistics.induction_targets`, the queries
  the induction labels' corpus scores read), over sequences drawn in a seeded order up to
  :attr:`CopyingSettings.corpus_tokens` tokens, read on candidates that start with those sequences' own tokens. Random
  tokens are not text: a deep head whose values earlier layers build from context may copy on text and less on the
  probe, so a label is earned on either (:mod:`qkviz.analysis.labels.writing_rule`).
* ``attended-logit-raise``: the mean over the same queries of ``sum_j a_ij (l_j[own] - mean_c l_j[c])`` at the
  query (each write with the query's divisors): how much, in logits, attending raises the attended tokens' own logit
  over the candidates' mean.
* ``copying-weights-only``: TransformerLens's copying score of the OV circuit, from the weights alone: the share of
  the candidates whose own token is among the top ``top`` of its row of ``W_E W_V W_O W_U`` (the norms' gains on the
  way, biases left out); chance ``top / |C|``. It does not see what earlier layers build into the values, so a deep
  head can copy on text and score near chance here; the labels are earned on the probe, not by it.

Each is a row of the probe table (:data:`qkviz.probes.head_probes.PROBE_COLUMNS`). A model without an unembedding
(an encoder's base model, MiniLM) is refused in one line, which the atlas keeps as its ``writes_note``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from qkviz.analysis.labels.registry import COPYING, INDUCTION, SUPPRESSION
from qkviz.analysis.labels.writing_rule import CORPUS_FORM, LOGIT_RAISE, SHUFFLED, WEIGHTS_ONLY
from qkviz.analysis.statistics.induction_scores import induction_targets
from qkviz.core.errors import QkvizError
from qkviz.probes.head_probes import PROBE_COLUMNS, ProbeSettings, configured_special_ids, probe_sequences
from qkviz.probes.model_on_demand import run_language_model
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class CopyingSettings:
    """The candidates the writes are ranked on, and the top (and bottom) that counts as copied (suppressed)."""

    candidates: int = 2000
    top: int = 5
    seed: int = 0
    #: the corpus form's budget: tokens of the run's own sequences traced (0: the corpus form is not measured)
    corpus_tokens: int = 1000

    def describe(self) -> str:
        return (f"own token among the top {self.top} of {self.candidates:,} candidate tokens (the probe's, the "
                f"corpus's most frequent, seeded vocabulary ids; seed {self.seed})")


def candidate_ids(run: StoredRun, probe_ids: np.ndarray, vocabulary: int, excluded: set[int],
                  settings: CopyingSettings) -> np.ndarray:
    """The candidate token ids: the probe's own tokens, then the corpus's most frequent tokens, then seeded random ids
    of the vocabulary, ``settings.candidates`` in all (fewer only where the vocabulary has fewer), never one of
    ``excluded`` (special tokens)."""
    chosen = list(dict.fromkeys(int(i) for i in probe_ids.ravel() if int(i) not in excluded))
    tokens = run.tokens[~run.tokens.is_special]
    for token_id in tokens.token_id.value_counts().index:
        if len(chosen) >= settings.candidates:
            break
        if int(token_id) not in excluded:
            chosen.append(int(token_id))
    chosen = list(dict.fromkeys(chosen))[:settings.candidates]
    rest = np.setdiff1d(np.arange(vocabulary), np.array(sorted(set(chosen) | excluded), dtype=np.int64))
    fill = np.random.default_rng(settings.seed).permutation(rest)[:max(0, settings.candidates - len(chosen))]
    return np.concatenate([np.array(chosen, dtype=np.int64), fill.astype(np.int64)])


def _excluded(model, framing: np.ndarray) -> set[int]:
    """The ids no candidate may be: the probe's framing tokens and the special tokens the configuration names."""
    return {int(i) for i in framing.ravel()} | configured_special_ids(model.config)


def _ranks(logits: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per source row: how many candidates rank above its own token (``own``: a column of ``logits``), how many
    below."""
    mine = logits[np.arange(len(own)), own][:, None]
    return (logits > mine).sum(axis=1), (logits < mine).sum(axis=1)


@dataclass
class _HeadSums:
    """One head's sums over the probe's queries."""

    copying: float = 0.0
    suppression: float = 0.0
    copying_shuffled: float = 0.0
    suppression_shuffled: float = 0.0
    raise_: float = 0.0


def _add_sequence(sums: _HeadSums, source, queries: np.ndarray, own: np.ndarray, shuffled: np.ndarray, top: int) -> None:
    """Add one sequence's queries: ``own[j]`` the column of source ``j``'s token among the candidates (-1: not one,
    a framing token), ``shuffled[j]`` another candidate's."""
    counted = own >= 0
    attention = source.attention[queries][:, counted]                                   # [query, source]
    logits = source.logits[counted]
    above, below = _ranks(logits, own[counted])
    above_shuffled, below_shuffled = _ranks(logits, shuffled[counted])
    sums.copying += float((attention @ (above < top)).sum())
    sums.suppression += float((attention @ (below < top)).sum())
    sums.copying_shuffled += float((attention @ (above_shuffled < top)).sum())
    sums.suppression_shuffled += float((attention @ (below_shuffled < top)).sum())
    lift = logits[np.arange(len(logits)), own[counted]] - logits.mean(axis=1)               # per source
    ratio = source.divisor[counted][None, :] / source.divisor[queries][:, None]             # its divisor at the query
    sums.raise_ += float((attention * ratio * lift[None, :]).sum())


def corpus_repeats(run: StoredRun, settings: CopyingSettings) -> list[tuple[np.ndarray, np.ndarray]]:
    """The corpus form's sequences: ``(token ids, query positions)``, the queries those whose token and the one before
    it occurred earlier in the sequence; sequences with such queries taken in a seeded order until
    ``settings.corpus_tokens`` tokens are traced (the last one cut there, keeping its queries before the cut)."""
    ids = run.tokens.token_id.to_numpy()
    order = np.random.default_rng(settings.seed).permutation(run.n_sentences)
    chosen, left = [], settings.corpus_tokens
    for sentence in order:
        if left <= 1:
            break
        sequence = ids[run.sentence_tokens(int(sentence))][:left].astype(np.int64)
        queries = np.array([position for position, _ in induction_targets(sequence)], dtype=np.int64)
        if len(queries):
            chosen.append((sequence, queries))
            left -= len(sequence)
    return chosen


def _scored(run: StoredRun, model, sequences, candidates: np.ndarray, copying: CopyingSettings,
            progress: bool, what: str) -> tuple[dict[tuple[int, int], _HeadSums], int]:
    """Every head's sums over ``sequences`` (``(token ids, query positions)``) read on ``candidates``, and the number
    of queries."""
    import torch
    from tqdm.auto import tqdm

    from qkviz.extraction.residual.own_token_writes import own_token_trace

    column = {int(token): index for index, token in enumerate(candidates)}
    permutation = np.random.default_rng(copying.seed).permutation(len(candidates))
    sums = {(layer, head): _HeadSums() for layer in range(run.n_layers) for head in range(run.n_heads)}
    rules = [[run.logit_rule(layer, head) for head in range(run.n_heads)] for layer in range(run.n_layers)]
    for ids, queries in tqdm(sequences, desc=what, unit="sequence", disable=not progress):
        traced = ids[:int(queries.max()) + 1]                       # a causal model's query reads no later token
        trace = own_token_trace(model, traced, range(len(traced)))
        unembedding = trace.unembedding.weight.detach().double()[torch.as_tensor(candidates)]
        own = np.array([column.get(int(token), -1) for token in traced])
        shuffled = np.where(own >= 0, permutation[np.maximum(own, 0)], -1)
        for layer in range(run.n_layers):
            for head, source in enumerate(trace.source_logits(layer, rules[layer], unembedding)):
                _add_sequence(sums[(layer, head)], source, queries, own, shuffled, copying.top)
    return sums, sum(len(queries) for _ids, queries in sequences)


def _rows(sums: dict[tuple[int, int], _HeadSums], n_queries: int, chance: float, source: str,
          corpus: bool = False) -> list[tuple]:
    rows = []
    for (layer, head), head_sums in sums.items():
        for name, score, its_chance in (
                (COPYING.name, head_sums.copying, chance), (SUPPRESSION.name, head_sums.suppression, chance),
                (COPYING.name + SHUFFLED, head_sums.copying_shuffled, chance),
                (SUPPRESSION.name + SHUFFLED, head_sums.suppression_shuffled, chance),
                (LOGIT_RAISE, head_sums.raise_, 0.0)):
            rows.append((layer, head, _corpus_name(name) if corpus else name, score / n_queries, its_chance, n_queries,
                         source))
    return rows


def _corpus_name(name: str) -> str:
    """``copying-shuffled`` -> ``copying-corpus-shuffled``: the corpus form's row of a probe row."""
    return (name[:-len(SHUFFLED)] + CORPUS_FORM + SHUFFLED) if name.endswith(SHUFFLED) else name + CORPUS_FORM


def _weights_only(run: StoredRun, model, first_id: int, candidates: np.ndarray, settings: CopyingSettings) -> np.ndarray:
    """``[layer, head]``: TransformerLens's copying score of every head (see the module)."""
    import torch

    from qkviz.extraction.residual.own_token_writes import own_token_trace

    trace = own_token_trace(model, [first_id], [0])
    embeddings = model.get_input_embeddings()
    with torch.no_grad():
        rows = embeddings(torch.as_tensor(candidates, device=next(model.parameters()).device)).double()
    unembedding = trace.unembedding.weight.detach().double()[torch.as_tensor(candidates)]
    scores = np.zeros((run.n_layers, run.n_heads))
    own = np.arange(len(candidates))
    for layer in range(run.n_layers):
        for head, logits in trace.embedding_logits(layer, list(range(run.n_heads)), rows, unembedding).items():
            scores[layer, head] = float((_ranks(logits, own)[0] < settings.top).mean())
    return scores


def copying_probe(run: StoredRun, settings: ProbeSettings = ProbeSettings(), copying: CopyingSettings = CopyingSettings(),
                  *, model=None, device: str = "cpu", progress: bool = False) -> pd.DataFrame:
    """Every head's copying and suppression scores on the repeated-token probe, their shuffled controls, the mean
    logit raise of the attended tokens and the weights-only copying score (see the module): rows of
    :data:`qkviz.probes.head_probes.PROBE_COLUMNS`. A model without an unembedding is refused in one line."""
    if run.is_image_run or not run.is_causal:
        raise QkvizError(f"run {run.path}: its model is an encoder (no unembedding: nothing it writes is a logit)")
    model = run_language_model(run, model, device, "the copying probe")
    probe, drawn_from = probe_sequences(run, model, settings)
    framing = np.concatenate([probe.ids[:, :probe.prefix], probe.ids[:, probe.ids.shape[1] - probe.suffix:]], axis=1)
    vocabulary = int(model.get_output_embeddings().weight.shape[0]) if model.get_output_embeddings() is not None else 0
    excluded = _excluded(model, framing)
    candidates = candidate_ids(run, probe.ids[:, probe.prefix:probe.prefix + 2 * probe.half], vocabulary, excluded,
                               copying)
    queries = probe.targets(INDUCTION.name, run.is_causal)[0]
    sums, n_queries = _scored(run, model, [(ids, queries) for ids in probe.ids], candidates, copying, progress,
                              "copying probe")
    weights_only = _weights_only(run, model, int(probe.ids[0, 0]), candidates, copying)
    chance = copying.top / len(candidates)
    source = f"{settings.describe()}, {drawn_from}; {copying.describe()}"
    rows = _rows(sums, n_queries, chance, source)
    rows += [(layer, head, WEIGHTS_ONLY, float(weights_only[layer, head]), chance, len(candidates), source)
             for layer, head in sums]
    repeats = corpus_repeats(run, copying) if copying.corpus_tokens > 0 else []
    if repeats:
        special = {int(i) for i in run.tokens.token_id[run.tokens.is_special]}
        own_candidates = candidate_ids(run, np.concatenate([ids for ids, _queries in repeats])[None], vocabulary,
                                       excluded | special, copying)
        corpus_sums, corpus_queries = _scored(run, model, repeats, own_candidates, copying, progress,
                                              "copying on the corpus")
        tokens = sum(int(queries.max()) + 1 for _ids, queries in repeats)
        corpus_source = (f"the corpus's own repeats: {corpus_queries:,} queries of {len(repeats)} sequences "
                         f"({tokens:,} tokens, seed {copying.seed}); {copying.describe()}")
        rows += _rows(corpus_sums, corpus_queries, copying.top / len(own_candidates), corpus_source, corpus=True)
        logger.info("copying on the corpus: %d queries of %d sequences", corpus_queries, len(repeats))
    logger.info("copying probe of %d heads over %d queries, %d candidates", len(sums), n_queries, len(candidates))
    return pd.DataFrame(rows, columns=list(PROBE_COLUMNS))
