"""One forward pass of a model as qkviz runs it: over whole sequences at once, with no key-value cache.

qkviz never generates, so a cache only costs memory; and some families cannot build one outside generation (a
hybrid model whose first layers are linear attention asks its cache for a sequence length only attention layers
keep). Every pass qkviz makes through a model goes through :func:`forward`.
"""

from __future__ import annotations

import functools
import inspect

import torch


@functools.lru_cache(maxsize=64)
def _accepts_use_cache(forward) -> bool:
    try:
        parameters = inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False
    return "use_cache" in parameters


def forward(model: torch.nn.Module, **inputs):
    """``model(**inputs)``, with ``use_cache=False`` where the model's forward takes it."""
    if _accepts_use_cache(type(model).forward):
        inputs.setdefault("use_cache", False)
    return model(**inputs)
