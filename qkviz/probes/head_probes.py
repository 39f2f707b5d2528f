"""The built-in probes of a run's heads, run on the run's own model (loaded on demand, as explanations load it).

Induction and duplicate-token heads are found on seeded repeated random tokens (TransformerLens's head detector,
Olsson et al. 2022; :mod:`qkviz.probes.repeat_probe`), framed as the run frames its sequences (its first
sequence's leading and trailing special tokens) and drawn from the tokens of the run's corpus (the vocabulary, less
its special tokens, where the corpus has too few distinct tokens). The result is a table of one row per head and
probe: ``layer, head, probe, score, chance, queries, source``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.probes.model_on_demand import run_model
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

PROBE_COLUMNS = ("layer", "head", "probe", "score", "chance", "queries", "source")


@dataclass(frozen=True)
class ProbeSettings:
    """The repeated-random-tokens probe: ``sequences`` sequences of ``half`` random tokens written twice, seeded."""

    sequences: int = 8
    half: int = 50
    seed: int = 0

    def describe(self) -> str:
        return (f"repeated random tokens: {self.sequences} sequences of {self.half} tokens written twice "
                f"(seed {self.seed})")


def _framing(run: StoredRun) -> tuple[list[int], list[int]]:
    """The special tokens the run's first sequence starts and ends with (BOS, [CLS] ... [SEP])."""
    rows = run.tokens.iloc[run.sentence_tokens(0)]
    special, ids = rows.is_special.to_numpy(bool), rows.token_id.to_numpy(np.int64)
    lead = int(np.argmin(special)) if not special.all() else len(special)
    trail = int(np.argmin(special[::-1])) if not special.all() else 0
    return ids[:lead].tolist(), ids[len(ids) - trail:].tolist()


def configured_special_ids(config) -> set[int]:
    """The special token ids a model's configuration names (BOS, EOS, padding, [SEP], [CLS])."""
    return {int(i) for name in ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id")
            for i in np.atleast_1d(getattr(config, name, None) or []) if i is not None}


def _pool(run: StoredRun, model, settings: ProbeSettings) -> tuple[np.ndarray, str]:
    tokens = run.tokens
    special_ids = set(tokens.token_id[tokens.is_special].astype(int))
    corpus = np.unique(tokens.token_id[~tokens.is_special].to_numpy(np.int64))
    if len(corpus) >= 4 * settings.half:
        return corpus, f"drawn from the corpus's {len(corpus):,} distinct tokens"
    config = model.config
    special_ids |= configured_special_ids(config)
    vocabulary = np.setdiff1d(np.arange(int(config.vocab_size)), np.fromiter(special_ids, np.int64, len(special_ids)))
    return vocabulary, f"drawn from the vocabulary's {len(vocabulary):,} ids (the corpus has too few distinct tokens)"


def probe_sequences(run: StoredRun, model, settings: ProbeSettings):
    """The probe's sequences (:class:`qkviz.probes.repeat_probe.RepeatedTokens`) for the run's model, and where
    their tokens were drawn from."""
    from qkviz.probes.repeat_probe import RepeatedTokens

    prefix, suffix = _framing(run)
    pool, drawn_from = _pool(run, model, settings)
    return RepeatedTokens.draw(pool, settings.sequences, settings.half, settings.seed, prefix, suffix), drawn_from


def probe_heads(run: StoredRun, settings: ProbeSettings = ProbeSettings(), *, model=None,
                device: str = "cpu") -> pd.DataFrame:
    """Every head's score on the repeated-random-tokens probe (:data:`PROBE_COLUMNS`; the probes of
    :data:`qkviz.probes.repeat_probe.PROBES`), from the run's own model (``model`` if given, checked to be it)."""
    if run.is_image_run:
        raise QkvizError(f"run {run.path} is an image run; the repeated-token probes are for text models")
    from qkviz.probes.repeat_probe import PROBES, probe_scores

    model = run_model(run, model, device, "the repeated-token probe")
    probe, drawn_from = probe_sequences(run, model, settings)
    logger.info("probing %d heads on %s", run.n_layers * run.n_heads, settings.describe())
    scores = probe_scores(model, probe, device=device)
    source = f"{settings.describe()}, {drawn_from}"
    rows = []
    for name in PROBES:
        queries = len(probe.targets(name, run.is_causal)[0]) * settings.sequences
        for layer in range(run.n_layers):
            for head in range(run.n_heads):
                rows.append((layer, head, name, float(scores[name][layer, head]),
                             float(scores[f"{name}:chance"][layer, head]), queries, source))
    return pd.DataFrame(rows, columns=list(PROBE_COLUMNS))
