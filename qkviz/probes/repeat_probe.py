"""The repeated-random-tokens probe of every head (torch): the set-up of TransformerLens's head detector and of
Olsson et al. 2022.

A probe sequence is ``prefix + r + r + suffix``: ``r`` is ``half`` token ids drawn at random (no id twice), written
twice, between the tokens the model's tokenizer frames every input with (BOS, [CLS] ... [SEP]). A query ``t`` of the
second copy has seen its own token before, at ``t - half``: a **duplicate-token** head attends there, an
**induction** head to the token that followed it, ``t - half + 1``. In an encoder a query of the first copy sees the
second one too, so its targets are ``t + half`` and ``t + half + 1``. A **previous-token** head attends to ``t - 1``.

The model runs once over every probe sequence, with qkviz's capture (:mod:`qkviz.extraction.capture.recorder`): each layer's
queries and keys become attention by the layer's own :class:`~qkviz.core.logit_rule.LogitRule`, exactly as the
rest of qkviz recomputes it, and each head's score is the mean attention its queries pay to their target, beside the
score a head attending uniformly would get (its chance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from qkviz.analysis.labels.registry import COPYING_LABELS, HEAD_LABEL, PREVIOUS_TOKEN
from qkviz.core.attention import allowed_pairs, attention_probs
from qkviz.extraction.adapters import model_adapter
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.capture.forward_pass import forward

#: the probes this module scores, each a target position per query (see the module): the copying labels (induction,
#: duplicate-token), then the previous token
PROBES = (*(label.name for label in COPYING_LABELS), PREVIOUS_TOKEN.name)


@dataclass(frozen=True)
class RepeatedTokens:
    """Probe sequences ``[sequence, position]``: ``prefix`` framing tokens, two copies of ``half`` random ids,
    ``suffix`` framing tokens."""

    ids: np.ndarray
    half: int
    prefix: int
    suffix: int

    @classmethod
    def draw(cls, pool: np.ndarray, n_sequences: int, half: int, seed: int, prefix: list[int] = (),
             suffix: list[int] = ()) -> "RepeatedTokens":
        """``n_sequences`` sequences whose random halves are drawn from ``pool`` (distinct ids) without
        replacement, seeded."""
        pool = np.unique(np.asarray(pool, dtype=np.int64))
        if len(pool) < half:
            raise ValueError(f"a probe of {half} distinct tokens needs at least that many ids to draw from, got "
                             f"{len(pool)}")
        generator = np.random.default_rng(seed)
        rows = []
        for _ in range(n_sequences):
            drawn = generator.choice(pool, size=half, replace=False)
            rows.append(np.concatenate([np.asarray(prefix, dtype=np.int64), drawn, drawn,
                                        np.asarray(suffix, dtype=np.int64)]))
        return cls(np.stack(rows), half, len(prefix), len(suffix))

    def targets(self, probe: str, causal: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(query positions, key positions)`` of ``probe`` (one of :data:`PROBES`), the same in every sequence."""
        first, second = self.prefix, self.prefix + self.half
        copy = np.arange(self.half)
        if probe == PREVIOUS_TOKEN.name:
            queries = np.arange(self.prefix + 1, second + self.half)
            return queries, queries - 1
        step = HEAD_LABEL[probe].copy_step      # the earlier occurrence (duplicate-token), the token after it (induction)
        later = (second + copy, first + copy + step)                 # second copy -> first copy (its last token's
        if causal:                                                   # successor is the second copy's first)
            return later
        # an encoder's first copy also sees the second: targets half ahead (their successors past the end excluded)
        keep = first + copy + self.half + step < second + self.half
        earlier = (first + copy[keep], (first + copy + self.half + step)[keep])
        return np.concatenate([later[0], earlier[0]]), np.concatenate([later[1], earlier[1]])


def probe_scores(model: torch.nn.Module, probe: RepeatedTokens, device: str = "cpu",
                 batch_size: int = 8) -> dict[str, np.ndarray]:
    """Per probe of :data:`PROBES`, ``[layer, head]`` float64 mean attention of its queries to their targets; and
    per probe ``"<probe>:chance"``, the mean over the same queries of ``1 / (keys the query may attend to)``.

    The model runs under qkviz's capture; attention is recomputed per head with the layer's logit rule."""
    adapter = model_adapter(model)
    shape = adapter.shape(model.config)
    scores = {name: np.zeros((shape.n_layers, shape.n_heads)) for name in PROBES}
    chances = {name: np.zeros((shape.n_layers, shape.n_heads)) for name in PROBES}
    group = shape.n_heads // shape.n_kv_heads
    recorder: AttentionRecorder

    def score(layer: int, queries: torch.Tensor, keys: torch.Tensor, _value_norms) -> None:
        settings = recorder.settings[layer]
        q, k = queries.double().cpu().numpy(), keys.double().cpu().numpy()
        rule = settings.rule(0)             # the mask is the layer's: its heads differ only in ALiBi slopes and sinks
        targets = {name: probe.targets(name, rule.causal) for name in PROBES}
        n_keys = allowed_pairs(probe.ids.shape[1], rule).sum(axis=1)
        for name, (rows, _) in targets.items():
            chances[name][layer] = float(np.mean(1.0 / n_keys[rows]))
        for head in range(shape.n_heads):
            head_rule = settings.rule(head)
            for sequence in range(len(q)):
                probs = attention_probs(q[sequence, head], k[sequence, head // group], head_rule)
                for name, (rows, columns) in targets.items():
                    scores[name][layer, head] += float(probs[rows, columns].mean())

    recorder = AttentionRecorder(LayerCalls(adapter.attention_modules(model)), score)
    ids = torch.as_tensor(probe.ids, dtype=torch.long)
    with torch.inference_mode(), capturing(model, recorder):
        for start in range(0, len(ids), batch_size):
            batch = ids[start:start + batch_size].to(device)
            forward(model, input_ids=batch, attention_mask=torch.ones_like(batch))
    for name in PROBES:
        scores[name] /= len(ids)
    return {**scores, **{f"{name}:chance": value for name, value in chances.items()}}
