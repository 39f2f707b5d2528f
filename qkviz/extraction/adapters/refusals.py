"""Families whose attention adds a term to ``scale * q . k`` that the queries and keys cannot express (and one
configuration, Falcon with ALiBi, whose attention transformers computed two ways before release 5.25).

Declared by model type (and, where a configuration decides it, by a check of the configuration), so that such
a model is refused before its weights load, in one line that says why. Anything not declared here still passes
the exactness gate (:mod:`qkviz.extraction.gate.exactness_gate`) before a run is written.
"""

from __future__ import annotations

from typing import Callable

from qkviz.extraction.adapters.model_families import DEBERTA, FALCON_ALIBI, FALCON_ALIBI_EXACT_FROM, LATENT_ATTENTION, MPNET

_INEXPRESSIBLE = ", which q.k cannot express"

#: model type -> why its attention cannot be recomputed from queries and keys
REFUSED_MODEL_TYPES: dict[str, str] = {
    "deberta": DEBERTA + _INEXPRESSIBLE,
    "deberta-v2": DEBERTA + _INEXPRESSIBLE,
    "mpnet": MPNET + _INEXPRESSIBLE,
    # attention computed by the family's own code in a form that is not softmax(scale * q.k) over every key
    "cpmant": "CPM-Ant adds a learned segment and relative-position bias to every attention logit" + _INEXPRESSIBLE,
    "longformer": ("Longformer attends within a sliding window plus global tokens, computed by its own code in "
                   "overlapping chunks: a mask qkviz does not store"),
    "perceiver": LATENT_ATTENTION,
    "reformer": "Reformer attends within hashed (LSH) buckets or local chunks: a mask qkviz does not store",
    "nystromformer": "Nystromformer approximates softmax attention from landmark averages, not softmax(q.k)",
    "mra": "MRA approximates attention at several block resolutions, not softmax(q.k)",
    "yoso": "YOSO estimates attention by locality-sensitive hashing, not softmax(q.k)",
}


def _falcon(config) -> str | None:
    """Falcon with ALiBi on a release before :data:`FALCON_ALIBI_EXACT_FROM` (from it on, the exactness gate decides)."""
    import transformers
    from packaging.version import Version

    if not getattr(config, "alibi", False) or Version(transformers.__version__) >= Version(FALCON_ALIBI_EXACT_FROM):
        return None
    return f"{FALCON_ALIBI} (transformers {transformers.__version__}; exact from {FALCON_ALIBI_EXACT_FROM} on)"


def relative_positions(config) -> str | None:
    kind = getattr(config, "position_embedding_type", "absolute") or "absolute"
    if kind not in ("absolute", "rope", "rotary"):
        return (f"position_embedding_type={kind!r} adds relative-position terms to the attention logit; "
                "only 'absolute' can be reproduced from queries and keys")
    return None


#: model type -> a check of the configuration returning why it is refused, or None
REFUSED_CONFIGURATIONS: dict[str, Callable[[object], str | None]] = {
    "falcon": _falcon,
}


def refusal_reason(config) -> str | None:
    """Why a model of ``config`` cannot be captured exactly, or None where nothing declared stands in its way."""
    model_type = str(getattr(config, "model_type", ""))
    if model_type in REFUSED_MODEL_TYPES:
        return REFUSED_MODEL_TYPES[model_type]
    check = REFUSED_CONFIGURATIONS.get(model_type)
    return check(config) if check is not None else relative_positions(config)
