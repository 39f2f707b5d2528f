"""What a head moves: ``|W_O^h v_j|``, the length of each token's value vector after query head ``h``'s slice of
the attention's output projection (torch).

A query head writes ``sum_j a_ij W_O^h v_j`` into the residual stream (the output bias and any norm after the
projection left out): ``v_j`` the value of its key-value head (``[d_value]``, as the attention function receives
it), ``W_O^h`` the rows of the output projection its output meets (``[d_value, d_model]``,
:meth:`~qkviz.extraction.adapters.FamilyAdapter.output_head_slices`). Attention weight on a token whose value the
projection shrinks moves little (Kobayashi et al. 2020): ``a_ij |W_O^h v_j|`` is what the token contributes.

The length is computed without the ``d_model``-wide product: ``W_O^h`` is factored once per extraction,
``(W_O^h)^T = Q_h R_h`` (``R_h`` ``[d_value, d_value]``, the Cholesky factor of the Gram matrix
``G_h = W_O^h (W_O^h)^T``), so ``|W_O^h v| = |R_h v|``: ``pos x heads x d_value^2`` multiply-adds per layer, a
fraction of the output projection's ``pos x heads x d_value x d_model`` -- and, unlike ``v^T G_h v``, without
the cancellation of a squared norm.

The factorisation holds only where the output projection receives exactly what attention returned, every head's
``sum_j a_ij v_j`` side by side. A family that changes it on the way (a gate per token, a norm per head) has no
output norms: :func:`projection_mismatch` measures it on the exactness gate's own eager pass
(:mod:`qkviz.extraction.gate.exactness_gate`), and the run records why it has none.
"""

from __future__ import annotations

import torch

from qkviz.extraction.adapters import FamilyAdapter, ModelShape

#: the largest relative difference between the output projection's input and every head's ``sum_j a_ij v_j``
#: accepted as "the same" (float32 rounding is ~1e-6; a sigmoid gate is ~0.5)
MIXING_BOUND = 1e-3
#: the same where the gate compares in half precision (float32 weights would not fit): bfloat16 rounds to ~4e-3
HALF_MIXING_BOUND = 5e-2


def head_factors(model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape) -> list[torch.Tensor]:
    """Per layer, float32 ``[head, rank, d_value]``: ``R_h`` with ``|R_h v| = |W_O^h v|`` for every ``v``
    (``rank = min(d_value, d_model)``), factored in float64 once."""
    factors = []
    for slices in adapter.output_head_slices(model, shape):           # [head, d_value, d_model]
        upper = torch.linalg.qr(slices.double().transpose(1, 2), mode="r").R     # [head, rank, d_value]
        factors.append(upper.float())
    return factors


def side_by_side(factors: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """One layer's ``factors`` ``[head, rank, d_value]`` (:func:`head_factors`) as ``[kv_head, d_value, group x rank]``:
    the transposed factors of the query heads that read each key-value head, side by side, so that one product per
    key-value head projects its values for all of them."""
    heads, rank, d_value = factors.shape
    grouped = factors.reshape(kv_heads, heads // kv_heads, rank, d_value)
    return grouped.permute(0, 3, 1, 2).reshape(kv_heads, d_value, -1).contiguous()


def head_output_norms(values: torch.Tensor, factors: torch.Tensor, n_heads: int) -> torch.Tensor:
    """float32 ``[batch, head, pos]``: ``|W_O^h v_j|`` for every query head ``h`` from ``values``
    ``[batch, kv_head, pos, d_value]`` (query head ``h`` reads key-value head ``h // (n_heads // n_kv_heads)``)
    and one layer's ``factors`` ``[head, rank, d_value]`` (:func:`head_factors`)."""
    return stacked_output_norms(values, side_by_side(factors, values.shape[1]), n_heads)


def stacked_output_norms(values: torch.Tensor, stacked: torch.Tensor, n_heads: int) -> torch.Tensor:
    """:func:`head_output_norms` from the layer's factors already :func:`side_by_side` (``[kv_head, d_value, group x
    rank]``, as :class:`OutputNormProbe` keeps them). One batched product over the key-value heads, the batch's tokens
    as its rows; the result is a view of a position-first ``[batch, pos, head]`` tensor."""
    batch, kv_heads, positions, d_value = values.shape
    group = n_heads // kv_heads
    tokens = values.float().transpose(0, 1).reshape(kv_heads, batch * positions, d_value)
    projected = torch.bmm(tokens, stacked.to(values.device)).view(kv_heads, batch * positions, group, -1)
    norms = torch.linalg.vector_norm(projected, dim=-1)                      # [kv_head, token, group]
    return norms.transpose(0, 1).reshape(batch, positions, n_heads).movedim(2, 1)


class OutputNormProbe:
    """The recorder's value sink (:class:`~qkviz.extraction.capture.recorder.AttentionRecorder`): turns each layer's values
    into every query head's output norms and hands them to ``sink(layer, norms [batch, head, pos])``."""

    def __init__(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, sink):
        device = next(model.parameters()).device
        self._stacked = [side_by_side(factor.to(device), shape.n_kv_heads) for factor in head_factors(model, adapter, shape)]
        self._heads = shape.n_heads
        self._sink = sink

    def __call__(self, layer: int, values: torch.Tensor) -> None:
        self._sink(layer, stacked_output_norms(values, self._stacked[layer], self._heads))


def unresolved_reason(adapter: FamilyAdapter) -> str | None:
    """Why ``adapter``'s family can have no output norms whatever its attention does, or None."""
    if not adapter.has_output_projection:
        return f"qkviz does not find the attention's output projection in {adapter.family} models"
    return None


def projection_mismatch(projection_input: torch.Tensor, probabilities: torch.Tensor, values: torch.Tensor,
                        lengths: list[int]) -> float:
    """The largest relative difference, over a batch's real tokens, between what the output projection received
    (``[batch, pos, head x d_value]``) and every head's ``sum_j a_ij v_j`` from the model's own ``probabilities``
    ``[batch, head, query, key]`` and the captured ``values`` ``[batch, kv_head, pos, d_value]``; 0 where they
    agree, about 0.5 under a sigmoid gate."""
    worst = 0.0
    heads = probabilities.shape[1]
    for row, n in enumerate(lengths):
        given = values[row, :, :n].double()
        mixed = probabilities[row, :, :n, :n].double() @ given.repeat_interleave(heads // given.shape[0], dim=0)
        received = projection_input[row, :n].double()
        if received.shape[-1] != heads * given.shape[-1]:
            return float("inf")
        received = received.reshape(n, heads, -1).transpose(0, 1)
        scale = float(mixed.abs().max().clamp_min(1e-30))
        worst = max(worst, float((received - mixed).abs().max()) / scale)
    return worst
