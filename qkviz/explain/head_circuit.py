"""A head's circuit: which earlier heads, MLPs and embeddings build the queries and keys that meet in it, and the
values it moves.

For head ``(L, H)`` over a sample of the run's sequences, every query ``i`` has its strongest partners ``J_i`` (its
:data:`PARTNERS` keys of most attention), weighted by their attention ``a_ij``. Each part of the residual stream
entering layer ``L`` gets, on each side:

* ``contribution``: its attention-weighted mean share of the logit of a query and its partners,
  ``sum_{i, j in J_i} a_ij c_ij / sum a_ij``, where ``c_ij`` is ``scale * q_i . k_{j,b}`` for key part ``b`` (the
  whole query against what ``b`` wrote into the key) and ``scale * q_{i,a} . k_j`` for query part ``a``;
* ``lift``: the same of ``c_ij`` less its mean over every key query ``i`` may attend to -- what the part adds to
  the partners *beyond* the other keys, the share the softmax sees (a part that raises every key alike lifts none).

The contributions of one side add up to the mean partner logit (``attrs["mean_logit"]``).

The third side, ``value`` (V-composition), says which parts wrote the values the head moves. Over every pair the head
may attend (all of them, not the partners alone: the head's output is its whole attention-weighted sum), the vector it
moves from key ``j`` is ``m_j = W_O^h v_j`` (the value through the head's slice of the output projection, before any
norm on the attention's output), ``u_j`` its unit vector, and part ``p``'s value ``v_{j,p}`` (the stream's part
through the frozen input norm and the value projection; the projection's bias the part ``L{L}.value_bias``):

* ``contribution``: ``sum_{i,j} a_ij (W_O^h v_{j,p}) . u_j / sum a_ij``, the part's attention-weighted mean share of
  the length of the vectors the head moves. The parts add up to ``sum a_ij |m_j| / sum a_ij`` (``attrs["mean_moved"]``,
  the attention-weighted mean of ``|W_O^h v_j|``, the output norm extraction keeps: ``run.output_norms``), checked
  against the model's own values;
* ``lift``: NaN. Lift is what a part adds to the partners beyond the other keys, which the softmax sees; no softmax
  acts on the values, so a part's share of them is its whole effect.

All three sides are linear in the per-token vectors: each part's sum is its vectors dotted with one vector per token
of the stream, which one backward pass through the layer's attention module gives for every part and side at once
(:func:`qkviz.extraction.residual.sequence_weighted_sums`), for every head of a layer at once. Each sequence is split
in chunks of :data:`CHUNK_TOKENS` tokens, so that no parts x tokens x width tensor is held beyond one chunk; the
chunks are read from one traced pass of the model per span of them (the whole sequence where its trace fits in
``SPAN_BYTES``), not a pass each. The partner weights themselves are :mod:`.partner_weights`. Long runs are
sampled: whole sequences in a seeded random order until ``budget`` tokens (``attrs["sample"]`` records which).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.explain.partner_weights import sequence_weights
from qkviz.probes.model_on_demand import run_model
from qkviz.probes.model_on_demand import sequence_ids
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: the tokens of one sequence whose parts are held at once
CHUNK_TOKENS = 256
#: the tokens a circuit reads by default (whole sequences, in a seeded random order)
DEFAULT_BUDGET = 5000
DEFAULT_SEED = 0


@dataclass(frozen=True)
class CircuitSample:
    """Which sequences a circuit read: all of them in a run under the budget, else a seeded random sample."""

    sentences: tuple[int, ...]
    n_tokens: int
    budget: int
    seed: int
    n_run_tokens: int

    def as_dict(self) -> dict:
        return {"sentences": list(self.sentences), "n_tokens": self.n_tokens, "budget": self.budget,
                "seed": self.seed, "n_run_tokens": self.n_run_tokens, "whole_run": self.n_tokens == self.n_run_tokens}


def sample_sequences(run: StoredRun, budget: int = DEFAULT_BUDGET, seed: int = DEFAULT_SEED) -> CircuitSample:
    """Whole sequences in a seeded random order until ``budget`` tokens (at least one sequence)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise QkvizError(f"budget must be a positive number of tokens, got {budget!r}")
    lengths = run.sentences.n_tokens.to_numpy()
    order = np.random.default_rng(seed).permutation(len(lengths))
    chosen, total = [], 0
    for sentence in order:
        if chosen and total + int(lengths[sentence]) > budget:
            continue
        chosen.append(int(sentence))
        total += int(lengths[sentence])
        if total >= budget:
            break
    return CircuitSample(tuple(sorted(chosen)), total, int(budget), int(seed), int(lengths.sum()))


@dataclass
class _Sums:
    """Running sums of one head's circuit."""

    query_names: list[str] | None = None
    key_names: list[str] | None = None
    query: np.ndarray | None = None       # [part, 2]: contribution, lift
    key: np.ndarray | None = None
    value_names: list[str] | None = None
    value: np.ndarray | None = None       # [part, 1]: contribution
    weight: float = 0.0
    logit: float = 0.0
    value_weight: float = 0.0

    def add(self, side: str, names: list[str], values: np.ndarray) -> None:
        known = getattr(self, f"{side}_names")
        if known is None:
            setattr(self, f"{side}_names", list(names))
            setattr(self, side, values)
        elif known != list(names):
            raise QkvizError("the parts of one layer differ between sequences; the circuit cannot add them up")
        else:
            setattr(self, side, getattr(self, side) + values)


def _chunks(n: int) -> list[np.ndarray]:
    return [np.arange(start, min(n, start + CHUNK_TOKENS)) for start in range(0, n, CHUNK_TOKENS)]


def circuit_sums(run: StoredRun, model, heads: Iterable[tuple[int, int]], sample: CircuitSample,
                 progress: bool = False, chosen: dict[int, np.ndarray] | None = None,
                 value: bool = True) -> dict[tuple[int, int], _Sums]:
    """The running sums of every head of ``heads`` over ``sample``: one model pass per chunk of each sequence, every
    layer asked for split from it (the value side too where ``value``, from the same backward pass). ``chosen``
    (sequence -> ``[query, key]`` booleans) replaces each query's strongest partners by the chosen pairs."""
    from qkviz.extraction.residual import sequence_weighted_sums

    heads = sorted(set((int(layer), int(head)) for layer, head in heads))
    for layer, head in heads:
        run.check_head(layer, head)
    sums = {key: _Sums() for key in heads}
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sample.n_tokens, desc="circuits", unit="token")
    last_layer = max(layer for layer, _ in heads)
    for sentence in sample.sentences:
        ids = sequence_ids(run, sentence)
        weights = {key: sequence_weights(run, *key, sentence, None if chosen is None else chosen[sentence])
                   for key in heads}
        for key, w in weights.items():
            sums[key].weight += w.weight
            sums[key].logit += w.logit
            sums[key].value_weight += w.value_weight
        chunks = _chunks(len(ids))

        def asked(index: int) -> dict:
            chunk = chunks[index]
            return {key: {"query": np.stack([w.toward_queries[chunk], w.toward_queries_lift[chunk]]),
                          "key": np.stack([w.toward_keys[chunk], w.toward_keys_lift[chunk]]),
                          **({"value": w.received[chunk][None]} if value else {})}
                    for key, w in weights.items()}
        done = set()
        for index, (layer, head), split in sequence_weighted_sums(model, ids, chunks, asked, last_layer,
                                                                  causal=run.is_causal):
            if bar is not None and index not in done:
                done.add(index)
                bar.update(len(chunks[index]))
            scale = run.scale(layer)
            for side, (names, values) in split.items():
                sums[(layer, head)].add(side, names, values if side == "value" else scale * values)
    if bar is not None:
        bar.close()
    return sums


@dataclass
class HeadCircuit:
    """One head's circuit: ``table`` (columns ``side`` -- ``query``, ``key``, ``value`` --, ``part``,
    ``contribution``, ``lift``; each side by ``|contribution|``, largest first), each side's total (``mean_logit``
    for the query and key sides, ``mean_moved`` for the value side) and what was sampled."""

    layer: int
    head: int
    table: pd.DataFrame
    mean_logit: float
    sample: dict = field(default_factory=dict)
    #: the value side's total: the attention-weighted mean length of the vectors the head moves (NaN without it)
    mean_moved: float = float("nan")

    def strongest(self, side: str, kinds: tuple[str, ...] = ("head", "mlp")) -> str | None:
        """The part of ``side`` with the largest ``|contribution|`` among earlier heads and MLPs (``kinds``)."""
        rows = self.table[(self.table.side == side) & self.table.part.map(part_kind).isin(kinds)]
        return None if rows.empty else str(rows.iloc[0].part)

    @property
    def summary(self) -> str:
        """"L18H6 reads its keys from L16H0 and its queries from L13.mlp; its values from L2H3"."""
        text = (f"L{self.layer}H{self.head} reads its keys from {self.strongest('key') or 'its embeddings'} and its "
                f"queries from {self.strongest('query') or 'its embeddings'}")
        if (self.table.side == "value").any():
            text += f"; its values from {self.strongest('value') or 'its embeddings'}"
        return text


def part_kind(part: str) -> str:
    """``head`` (``L3H2``), ``mlp`` (``L3.mlp``), ``bias`` (a norm's or projection's bias), or ``embedding``."""
    if part.startswith("L") and "." not in part and "H" in part:
        return "head"
    if part.endswith(".mlp"):
        return "mlp"
    if part.endswith("bias"):
        return "bias"
    return "embedding"


def circuit_from_sums(layer: int, head: int, sums: _Sums, sample: CircuitSample) -> HeadCircuit:
    """A head's :class:`HeadCircuit` from its running sums: each side's sums over its weight (the partner attention
    for the query and key sides, all attention for the value side, whose ``lift`` is NaN)."""
    weight = max(sums.weight, 1e-300)
    frames = []
    for side in ("query", "key", "value"):
        if getattr(sums, side) is None:
            continue
        values = getattr(sums, side) / (weight if side != "value" else max(sums.value_weight, 1e-300))
        frame = pd.DataFrame({"side": side, "part": getattr(sums, f"{side}_names"), "contribution": values[:, 0],
                              "lift": values[:, 1] if side != "value" else np.nan})
        order = np.argsort(-frame.contribution.abs().to_numpy(), kind="stable")
        frames.append(frame.iloc[order])
    table = pd.concat(frames, ignore_index=True)
    moved = float(sums.value.sum() / max(sums.value_weight, 1e-300)) if sums.value is not None else float("nan")
    table.attrs.update(layer=layer, head=head, mean_logit=sums.logit / weight, mean_moved=moved,
                       sample=sample.as_dict())
    return HeadCircuit(layer, head, table, sums.logit / weight, sample.as_dict(), moved)


def head_circuits(run: StoredRun, heads: Iterable[tuple[int, int]], *, budget: int = DEFAULT_BUDGET,
                  seed: int = DEFAULT_SEED, model=None, device: str = "cpu",
                  progress: bool = False) -> dict[tuple[int, int], HeadCircuit]:
    """The circuit of every head of ``heads`` (``(layer, head)`` pairs), from one sample of the run."""
    heads = list(heads)
    model = run_model(run, model, device, "head circuits")
    sample = sample_sequences(run, budget, seed)
    logger.info("circuits of %d heads over %d sequences (%d tokens)", len(heads), len(sample.sentences),
                sample.n_tokens)
    sums = circuit_sums(run, model, heads, sample, progress)
    return {key: circuit_from_sums(*key, value, sample) for key, value in sums.items()}


def head_circuit(run: StoredRun, layer: int, head: int, **options) -> HeadCircuit:
    """One head's circuit (:func:`head_circuits`)."""
    return head_circuits(run, [(layer, head)], **options)[(layer, head)]


def explain_selection(run: StoredRun, layer: int, head: int, queries, keys, *, model=None,
                      device: str = "cpu") -> HeadCircuit:
    """The attention-weighted mean split of the logits between selected ``queries`` and ``keys`` (token rows; every
    pair of one sequence that the head may attend, weighted by its attention): a lasso's "why", as a
    :class:`HeadCircuit` (its query and key sides) whose ``sample`` lists the sequences read."""
    from qkviz.explain.pair_logit import check_token

    queries = np.unique([check_token(run, "query", token) for token in np.asarray(queries).tolist()])
    keys = np.unique([check_token(run, "key", token) for token in np.asarray(keys).tolist()])
    if not len(queries) or not len(keys):
        raise QkvizError("select at least one query and one key")
    sentences = run.tokens.sentence.to_numpy()
    shared = sorted(set(sentences[queries].tolist()) & set(sentences[keys].tolist()))
    if not shared:
        raise QkvizError("the selected queries and keys share no sequence: a head's attention pairs tokens of one "
                         "sequence")
    chosen = {}
    for sentence in shared:
        rows = run.sentence_tokens(sentence)
        mask = np.zeros((rows.stop - rows.start,) * 2, dtype=bool)
        mask[np.ix_(queries[sentences[queries] == sentence] - rows.start, keys[sentences[keys] == sentence] - rows.start)] = True
        chosen[sentence] = mask
    n_tokens = int(sum(run.sentences.n_tokens.iloc[s] for s in shared))
    sample = CircuitSample(tuple(shared), n_tokens, n_tokens, 0, int(run.sentences.n_tokens.sum()))
    model = run_model(run, model, device, "attribution of a selection")
    sums = circuit_sums(run, model, [(layer, head)], sample, chosen=chosen, value=False)
    return circuit_from_sums(layer, head, sums[(layer, head)], sample)
