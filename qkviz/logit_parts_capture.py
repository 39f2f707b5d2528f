"""What the logit decomposition needs from the model itself, captured once at extraction (torch).

* Query and key biases, where the family's projections have them: ``[layer, head, d_head]`` and
  ``[layer, kv_head, d_head]`` float32. They are parameters, read from the attention module
  (BERT / RoBERTa ``query`` / ``key``, DistilBERT ``q_lin`` / ``k_lin``, GPT-2's fused
  ``c_attn``, Llama-style ``q_proj`` / ``k_proj``). Not taken where a QK-norm follows the
  projection: the stored vector is then not the projection plus its bias.
* Rotary tables, where the family rotates queries and keys: the ``cos`` and ``sin`` each layer's
  attention receives for positions ``0..P-1`` (``[layer, position, rotary_dim]``), recorded from
  one forward pass by a pre-hook on every attention module, so every rotary variant (scaling,
  partial rotation, local / global bases) is exactly the model's own.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from qkviz import run_files
from qkviz.adapters import FamilyAdapter, ModelShape

logger = logging.getLogger(__name__)

QUERY_BIAS_NAMES = ("query", "q_proj", "q_lin")
KEY_BIAS_NAMES = ("key", "k_proj", "k_lin")


def _projection_bias(module: torch.nn.Module, names: tuple[str, ...]) -> torch.Tensor | None:
    for name in names:
        projection = getattr(module, name, None)
        if projection is not None:
            return getattr(projection, "bias", None)
    return None


def query_key_biases(module: torch.nn.Module, shape: ModelShape) -> tuple[np.ndarray | None, np.ndarray | None]:
    """One attention module's ``([head, d_head], [kv_head, d_head])`` biases, or ``None`` each."""
    if getattr(module, "q_norm", None) is not None or getattr(module, "k_norm", None) is not None:
        return None, None
    fused = getattr(module, "c_attn", None)
    if fused is not None and getattr(fused, "bias", None) is not None:
        width = shape.n_heads * shape.head_dim
        query_bias, key_bias = fused.bias[:width], fused.bias[width:2 * width]
    else:
        query_bias, key_bias = _projection_bias(module, QUERY_BIAS_NAMES), _projection_bias(module, KEY_BIAS_NAMES)

    def per_head(bias, heads):
        if bias is None:
            return None
        return bias.detach().float().cpu().numpy().reshape(heads, shape.head_dim)

    return per_head(query_bias, shape.n_heads), per_head(key_bias, shape.n_kv_heads)


def rotary_tables(model: torch.nn.Module, modules: list[torch.nn.Module], n_positions: int, pad_id: int,
                  device: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(cos, sin)`` float32 ``[layer, position, rotary_dim]`` as each layer receives them, or ``None``."""
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def recorder(layer):
        def hook(_module, args, kwargs):
            embeddings = kwargs.get("position_embeddings")
            if embeddings is not None:
                cos, sin = embeddings
                seen[layer] = (cos[0].float().cpu(), sin[0].float().cpu())
        return hook

    handles = [module.register_forward_pre_hook(recorder(layer), with_kwargs=True)
               for layer, module in enumerate(modules)]
    try:
        input_ids = torch.full((1, n_positions), pad_id, dtype=torch.long, device=device)
        with torch.inference_mode():
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        for handle in handles:
            handle.remove()
    if not seen:
        return None
    if sorted(seen) != list(range(len(modules))):
        raise RuntimeError(f"rotary embeddings reached layers {sorted(seen)} only, of {len(modules)}")
    cos = torch.stack([seen[layer][0] for layer in range(len(modules))]).numpy()
    sin = torch.stack([seen[layer][1] for layer in range(len(modules))]).numpy()
    return cos, sin


def capture_logit_parts(model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, n_positions: int,
                        pad_id: int, device: str) -> dict[str, np.ndarray]:
    """``{run file: array}`` of the biases and rotary tables the model has (possibly none)."""
    modules = adapter.attention_modules(model)
    parts: dict[str, np.ndarray] = {}
    biases = [query_key_biases(module, shape) for module in modules]
    if all(query is not None for query, _ in biases):
        parts[run_files.QUERY_BIAS] = np.stack([query for query, _ in biases]).astype(np.float32)
    if all(key is not None for _, key in biases):
        parts[run_files.KEY_BIAS] = np.stack([key for _, key in biases]).astype(np.float32)
    tables = rotary_tables(model, modules, n_positions, pad_id, device)
    if tables is not None:
        parts[run_files.ROTARY_COS], parts[run_files.ROTARY_SIN] = tables
    logger.debug("logit parts: %s", sorted(parts))
    return parts
