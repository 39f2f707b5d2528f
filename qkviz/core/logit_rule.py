"""What one head adds to ``q . k`` on its way to the softmax: the one description every recomputation reads.

A model's attention logit from query ``i`` to key ``j`` of one sequence is more than ``q_i . k_j``: a scale, a
soft cap (Gemma 2), a mask (causal, a sliding window, chunks of tokens: Llama 4), a bias linear in the distance
(ALiBi: BLOOM, MPT, Falcon with ``alibi=True``), and a learned logit of no key in the softmax's denominator
(sinks: gpt-oss). A :class:`LogitRule` holds all of them for one head, as the run stores them; the functions of
:mod:`qkviz.core.attention` apply it. A term a new family adds is added here and there, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LogitRule:
    """One head's logit ``softcap * tanh(scale * q_i . k_j / softcap) + alibi_slope * (j - i)`` (each term only
    where the model has it), over the keys the mask allows: every key of the sequence in an encoder, ``j <= i``
    when ``causal``, ``|i - j| < window`` under a sliding window (``i - j < window`` when causal), ``i // chunk ==
    j // chunk`` under chunked attention; the softmax's denominator adds ``exp(sink)`` where the head has a sink,
    so that its probabilities sum to less than 1.

    ``alibi_slope``'s term is relative to the query (0 on the diagonal): the models add ``slope * j`` (or
    ``slope * (j - i)``), which differ by a constant per query and give the same probabilities. Between two
    sequences no distance exists: a logit across sequences (a search's partners, a layout's neighbours) is the
    content logit alone (:func:`qkviz.core.attention.dot_logits` without distances)."""

    scale: float
    causal: bool = False
    window: int | None = None
    chunk: int | None = None
    softcap: float | None = None
    alibi_slope: float | None = None
    sink: float | None = None

    def __post_init__(self) -> None:
        for name in ("window", "chunk"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"a logit rule's {name} must be a positive number of tokens or None, got {value}")

    @property
    def has_position_term(self) -> bool:
        """Whether the logit depends on the query's and the key's positions beyond the mask (ALiBi)."""
        return bool(self.alibi_slope)
