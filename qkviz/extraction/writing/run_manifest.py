"""What identifies a run (the fingerprint of its inputs), what its manifest says, and what extraction returns."""

from __future__ import annotations

import hashlib
import json
import platform
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import LayerAttentionSettings
from qkviz.extraction.models.loading import LoadedModel
from qkviz.store.background_hashing import in_background
from qkviz.store.run import StoredRun


@dataclass(frozen=True)
class ExtractionResult:
    run: StoredRun
    status: str          # "extracted", "resumed" or "reused"
    seconds: float
    #: wall seconds of each step, in order (:data:`qkviz.extraction.writing.pipeline.STEPS`; a step that did not run is absent)
    steps: dict[str, float] = field(default_factory=dict)

    @property
    def n_truncated(self) -> int:
        return int(self.run.manifest["counts"]["n_truncated_sentences"])


def fingerprint(identity: dict) -> str:
    """The sha256 of everything that determines a run's numbers (``identity``, JSON-able)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def model_identity(loaded, family: str) -> dict:
    """Hashes that change exactly when the model's numbers can change."""
    return identity_in_background(loaded, family).result()


def identity_in_background(loaded, family: str) -> Future:
    """:func:`model_identity` of the model as it is now, its weights hashed in a thread (hashing releases the GIL), so
    that the steps after it (tokenizing the corpus) run meanwhile. The configuration and the list of weights are taken
    now; the caller changes no weight in place before it reads the result."""
    tensors = sorted(loaded.model.state_dict().items())
    config = loaded.model.config.to_diff_dict()
    config.pop("_attn_implementation_autoset", None)
    config.pop("attn_implementation", None)
    config_text = json.dumps(config, sort_keys=True, default=str)
    known = {"family": family, "architecture": type(loaded.model).__name__,
             "config_sha256": hashlib.sha256(config_text.encode()).hexdigest()}
    return in_background({"identity": lambda: {**known, "weights_sha256": weights_sha256(tensors)}}, 1,
                         "qkviz-identity")["identity"]


def weights_sha256(tensors: list) -> str:
    """The sha256 of ``(name, tensor)`` pairs (a state dict's, sorted): each name, then the tensor's bytes."""
    import torch

    weights = hashlib.sha256()
    for name, tensor in tensors:
        weights.update(name.encode())
        # flattened first: a 0-dim parameter (a scalar gate or temperature) cannot be viewed as bytes; the bytes of
        # every other tensor are the same either way, so runs made before keep their fingerprint. The tensor's memory
        # is hashed where it lies (a CPU tensor already contiguous is not copied; no bytes object is made of it).
        if tensor.numel():
            weights.update(memoryview(tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()))
    return weights.hexdigest()


def qkviz_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qkviz")
    except PackageNotFoundError:   # run from a source tree that is not installed
        return "unknown"


def software_versions() -> dict:
    import torch
    import transformers

    return {"qkviz": qkviz_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "numpy": np.__version__, "python": platform.python_version()}


#: the manifest's optional ``attention`` keys -> the per-layer setting each holds; a key is written only where some
#: layer has the term, so that its absence (in runs of other models, and of qkviz before it) means "no such term"
OPTIONAL_TERMS = {"chunks": "chunk", "alibi_slopes": "alibi_slopes", "sinks": "sinks"}


def optional_terms(settings: dict[int, LayerAttentionSettings], layers: range) -> dict:
    """The manifest's optional per-layer terms (:data:`OPTIONAL_TERMS`) that the model has."""
    found = {}
    for key, name in OPTIONAL_TERMS.items():
        values = [getattr(settings[layer], name) for layer in layers]
        if any(value is not None for value in values):
            found[key] = [list(value) if isinstance(value, tuple) else value for value in values]
    return found


def run_manifest(identity: dict, loaded: LoadedModel, adapter: FamilyAdapter, shape: ModelShape,
                 settings: dict[int, LayerAttentionSettings], tokens, *, corpus_source: str, n_corpus_items: int,
                 n_sentences: int, n_truncated: int) -> dict:
    """Everything a reader needs to know about the run (``files`` and ``fingerprint`` are added on finish)."""
    layers = range(shape.n_layers)
    return {
        **identity,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": software_versions(),
        "model": {**identity["model"], "id": loaded.model_id, "source": loaded.source,
                  "description": adapter.description, **loaded.origin},
        "shape": {"n_layers": shape.n_layers, "n_heads": shape.n_heads, "n_kv_heads": shape.n_kv_heads,
                  "head_dim": shape.head_dim,
                  # a model mixing attention with other layers: the model layer of each run layer
                  **({"model_layers": list(adapter.layer_indices)} if adapter.layer_indices is not None else {})},
        "attention": {
            "causal": adapter.causal,
            "scales": [settings[layer].scale for layer in layers],
            "sliding_windows": [settings[layer].sliding_window for layer in layers],
            "softcaps": [settings[layer].softcap for layer in layers],
            "kv_head_of_head": [shape.kv_head_of(head) for head in range(shape.n_heads)],
            **optional_terms(settings, layers),
        },
        "corpus": {**identity["corpus"], "source": corpus_source, "n_corpus_sentences": n_corpus_items},
        "counts": {"n_sentences": n_sentences, "n_tokens": int(len(tokens)),
                   "n_special_tokens": int(tokens["is_special"].sum()), "n_truncated_sentences": n_truncated},
    }
