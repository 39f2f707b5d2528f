"""What each head's write from a token does to that token's own logit: the OV circuit read as copying.

A head ``(L, H)`` moves ``a_ij * v_j`` from source token ``j`` to query ``i``; through its slice of the output
projection, the norm on the attention's output where the family has one and the final norm (each with its divisor
fixed at the query, as :mod:`qkviz.extraction.residual.final_stream` fixes them) and the unembedding, that piece is the
head's direct effect on every logit. Here it is read against a set of candidate tokens (rows of the unembedding):

* :meth:`OwnTokenTrace.source_logits`: for every source ``j`` of a traced sequence, the logits over the candidates of
  the head's write from ``j`` (``W_U[C] F(P(W_O^h v_j))``, the norms with ``j``'s divisor: a positive factor per row,
  which ranks nothing differently), and each token's divisor, so that the write's effect at query ``i`` is
  ``a_ij * logits_j * divisor_j / divisor_i``. The attention weights are the model's own queries and keys through the
  head's logit rule, checked: the weighted values add up to what enters the output projection at every token.
* :meth:`OwnTokenTrace.embedding_logits`: the weights-only OV circuit of TransformerLens (``W_E W_V W_O W_U``, the
  copying score's matrix), here with the norms' gains on the way as TransformerLens folds them: each candidate's
  embedding through the layer's input norm, the attention module's value projection (its constant left out, as the
  weights-only circuit has no bias), the head's output slice, the post-norm and the final norm.

A family whose unembedding is not its last layer's output through one norm is refused in one line, as the direct
effects are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from qkviz.core.attention import attention_probs
from qkviz.core.logit_rule import LogitRule
from qkviz.extraction.residual.attention_replay import AttentionReplay
from qkviz.extraction.residual.frozen_norm import FrozenNorm
from qkviz.extraction.residual.head_writes import HeadTrace
from qkviz.extraction.residual.residual_parts import traced
from qkviz.extraction.residual.residual_stream import matches


@dataclass
class SourceLogits:
    """One head over one traced sequence: ``attention[i, j]`` (float64, the model's own), ``logits[j, c]`` the head's
    write from source ``j`` read on candidate ``c`` (with ``j``'s divisor), and ``divisor[j]``: the effect of that
    write at query ``i`` is ``attention[i, j] * logits[j] * divisor[j] / divisor[i]``."""

    attention: np.ndarray
    logits: np.ndarray
    divisor: np.ndarray


class OwnTokenTrace(HeadTrace):
    """A whole pass of one sequence, traced at the tokens asked for, keeping each layer's values and what follows the
    last layer; reads each head's writes on candidate tokens (see the module)."""

    def final_norm(self) -> FrozenNorm | None:
        """The final norm, its divisor fixed at the traced tokens (None where the unembedding reads the last layer's
        output itself); found as the norm whose output is the unembedding's own input, without splitting the stream."""
        if getattr(self, "_final_norm", False) is False:
            if self.unembed_in is None:
                raise self._refuse("its unembedding was not called on the traced tokens")
            target = self.unembed_in.double()
            found = [(name, real_in, real_out, module) for name, real_in, real_out, module in self.final_norms
                     if real_in is not None and matches(real_out.double(), target)]
            if not found and self.final_norms:
                raise self._refuse("what enters its unembedding is not its last layer's output through one norm")
            self._final_norm = self._frozen(*found[-1]) if found else None
        return self._final_norm

    def _to_logits(self, layer: int, writes: torch.Tensor, candidates: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``writes`` ``[..., token, width]`` (one per traced token, each with that token's divisors) through the
        post-norm, the final norm and the candidates' unembedding rows (times the model's scale): ``([..., token,
        candidate], divisor [token])``."""
        divisor = torch.ones(writes.shape[-2], dtype=torch.float64, device=writes.device)
        for norm in (self._post_norm(layer), self.final_norm()):
            if norm is not None:
                writes = norm.linear(writes)
                divisor = divisor * norm.sigma.reshape(-1).to(divisor)
        scale = self.after_unembedding()[0]
        # the candidates' logits in float32: they rank and average, never add up to a checked sum (half the time)
        return (writes.float() @ candidates.float().T).double() * scale, divisor

    def source_logits(self, layer: int, rules: list[LogitRule], candidates: torch.Tensor) -> list[SourceLogits]:
        """Every head's writes from every traced token of layer ``layer`` (``rules``: each head's logit rule) read on
        ``candidates`` (``[candidate, width]``, unembedding rows, float64): one :class:`SourceLogits` per head. The
        trace must hold every position up to the last traced one (a query reads every earlier token)."""
        record = self.records[layer]
        queries, keys = record.query.double().cpu().numpy(), record.key.double().cpu().numpy()
        values = self.values[layer]                                                  # [kv_head, token, d_value]
        d_value = values.shape[-1]
        heads_in = record.heads_in.double()
        kv = [self.shape.kv_head_of(head) for head in range(len(rules))]
        probabilities = np.stack([attention_probs(queries[head], keys[kv[head]], rule) for head, rule in enumerate(rules)])
        weighted = torch.as_tensor(probabilities, device=values.device) @ values[kv]             # [head, token, d_value]
        own = heads_in.reshape(len(heads_in), len(rules), d_value).transpose(0, 1)
        if not matches(weighted, own):
            raise self._refuse(f"layer {layer}'s attention-weighted values are not what enters its output projection")
        slices = torch.stack([self._slices[layer][head].double() for head in range(len(rules))])
        writes = values[kv] @ slices                                                 # [head, token, width]
        logits, divisor = self._to_logits(layer, writes, candidates.to(writes.device))
        logits, divisor = logits.cpu().numpy(), divisor.cpu().numpy()
        return [SourceLogits(probabilities[head], logits[head], divisor) for head in range(len(rules))]

    def _attention_norm(self, layer: int) -> FrozenNorm | None:
        """The norm (divisor fixed) whose output layer ``layer``'s attention module reads; None where it reads the
        layer's input itself (post-norm encoders)."""
        record = self.records[layer]
        for name, (real_in, real_out) in record.norms.items():
            if real_in is not None and matches(real_out.double(), record.attention_input.double()):
                return self._frozen(name, real_in.double(), real_out.double(), self._module(layer, name))
        if matches(record.input.double(), record.attention_input.double()):
            return None
        raise self._refuse(f"layer {layer}'s attention reads something other than its input or a norm of it")

    def embedding_logits(self, layer: int, heads: list[int], embeddings: torch.Tensor,
                         candidates: torch.Tensor) -> dict[int, np.ndarray]:
        """The weights-only OV circuit of each head of ``heads`` in layer ``layer`` (see the module):
        ``{head: [embedding row, candidate]}``. The trace is of one token (its divisors a common positive factor)."""
        if len(self.tokens) != 1:
            raise ValueError("the weights-only circuit reads a trace of one token")
        norm = self._attention_norm(layer)
        rows = embeddings.double().to(self.records[layer].attention_input.device)[:, None, :]
        rows = rows if norm is None else norm.linear(rows)
        rows = torch.cat([rows, torch.zeros_like(rows[:1])])
        record = self.records[layer]
        replay = AttentionReplay(self.model, self._attention_modules[layer], self.adapter.attention_path,
                                 record.attention_args, record.attention_kwargs, record.inner_norms, self.tokens,
                                 self.length, self._refuse, self._frozen)
        values = replay.values(rows, layer)[:, :, 0]                                 # [row, kv_head, d_value]
        values = values[:-1] - values[-1:]                                           # the module's constant left out
        out = {}
        for head in heads:
            writes = values[:, self.shape.kv_head_of(head)] @ self._slices[layer][head].double()
            out[head] = self._to_logits(layer, writes, candidates.to(writes.device))[0].cpu().numpy()
        return out


def own_token_trace(model: torch.nn.Module, token_ids, tokens) -> OwnTokenTrace:
    """An :class:`OwnTokenTrace` of the sequence ``token_ids`` at positions ``tokens`` (every position up to the last
    one for :meth:`~OwnTokenTrace.source_logits`, one token for :meth:`~OwnTokenTrace.embedding_logits`)."""
    return traced(model, np.asarray(token_ids), list(tokens), None, OwnTokenTrace)
