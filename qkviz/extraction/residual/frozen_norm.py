"""A norm with its divisor fixed at the value it had for one token: linear in what it is given.

Every norm a transformer applies to its residual stream or its queries and keys divides by a statistic of its
input (LayerNorm: the standard deviation after centring; RMSNorm: the root mean square). Held at the value it had
for the token in the model's own pass, the norm is affine: ``N(x) = g * centre(x) / sigma + beta``. Its linear part
``F(x) = g * centre(x) / sigma`` can then take each part of ``x`` on its own, and the parts' images add up to
``N(x) - beta`` exactly.

What the norm computes is read from its own pass, not assumed from its class: of the forms qkviz knows (centred or
not, scaled by ``weight``, ``1 + weight`` or nothing, with ``bias`` or not), the one that reproduces the module's
real output from its real input is used, and a norm that none reproduces is refused (:class:`UnknownNorm`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: how close the chosen form must reproduce the module's own output, relative to its size
FORM_TOLERANCE = 1e-4


class UnknownNorm(Exception):
    """A norm module whose output is none of the forms :func:`frozen_norm` knows."""


def is_norm(module: torch.nn.Module) -> bool:
    """A LayerNorm or RMSNorm of any family (its class name says so)."""
    return isinstance(module, torch.nn.LayerNorm) or "norm" in type(module).__name__.lower() and not any(
        True for _ in module.children())


def _epsilon(module: torch.nn.Module) -> float:
    for name in ("eps", "variance_epsilon", "epsilon", "layer_norm_eps"):
        value = getattr(module, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 1e-6


@dataclass(frozen=True)
class FrozenNorm:
    """One norm's form, with its divisor fixed per token: ``sigma`` broadcasts against inputs ``[..., width]``."""

    centred: bool
    gain: torch.Tensor | None        # [width] (float64), None: no scale
    bias: torch.Tensor | None        # [width] (float64), None: no bias
    sigma: torch.Tensor              # [..., 1] (float64)

    def linear(self, parts: torch.Tensor) -> torch.Tensor:
        """``F(parts) = g * centre(parts) / sigma`` (parts ``[..., width]``, broadcast against ``sigma``)."""
        parts = parts.double()
        if self.centred:
            parts = parts - parts.mean(dim=-1, keepdim=True)
        out = parts / self.sigma
        return out if self.gain is None else out * self.gain

    def transposed(self, vectors: torch.Tensor) -> torch.Tensor:
        """``F^T(vectors)``: ``F(p) . v = p . F^T(v)`` for every ``p`` (the centring is symmetric), so a part's dot
        product with ``v`` after the norm is its dot product with ``F^T(v)`` before it."""
        out = vectors.double() / self.sigma
        if self.gain is not None:
            out = out * self.gain
        return out - out.mean(dim=-1, keepdim=True) if self.centred else out

    def affine(self, parts: torch.Tensor) -> torch.Tensor:
        """``F(parts) + beta``: what the norm does to each row with its divisor fixed."""
        out = self.linear(parts)
        return out if self.bias is None else out + self.bias


def frozen_norm(module: torch.nn.Module, real_input: torch.Tensor, real_output: torch.Tensor) -> FrozenNorm:
    """The form of ``module`` that maps ``real_input`` to ``real_output`` (both ``[..., width]``, the tokens the
    divisor is fixed for), its divisor computed from ``real_input``; :class:`UnknownNorm` where no form does."""
    x, y = real_input.double(), real_output.double()
    eps = _epsilon(module)
    weight = getattr(module, "weight", None)
    bias = getattr(module, "bias", None)
    weight = None if not isinstance(weight, torch.Tensor) else weight.detach().double()
    bias = None if not isinstance(bias, torch.Tensor) else bias.detach().double()
    gains = [None] if weight is None else [weight, 1.0 + weight]
    size = float(y.abs().max()) or 1.0
    for centred in (True, False):
        centre = x - x.mean(dim=-1, keepdim=True) if centred else x
        sigma = torch.sqrt((centre * centre).mean(dim=-1, keepdim=True) + eps)
        for gain in gains:
            form = FrozenNorm(centred, gain, bias, sigma)
            if float((form.affine(x) - y).abs().max()) <= FORM_TOLERANCE * size:
                return form
    raise UnknownNorm(type(module).__name__)
