"""What the logit decomposition needs from the model itself, captured once at extraction (torch).

* Query and key biases, where the family's projections have them: ``[layer, head, d_head]`` and
  ``[layer, kv_head, d_head]`` float32. They are parameters, read from the projections the family's
  adapter names (:meth:`FamilyAdapter.projection`). Not taken where a QK-norm follows the
  projection: the stored vector is then not the projection plus its bias.
* First-layer embedding parts, for absolute-position models (adapters with ``embeddings``):
  see :class:`EmbeddingRecorder`.
* Rotary tables, where the family rotates queries and keys: the ``cos`` and ``sin`` each layer's
  attention receives for positions ``0..P-1`` (``[layer, position, rotary_dim]``), recorded from
  one forward pass by a pre-hook on every attention module, so every rotary variant (scaling,
  partial rotation, local / global bases) is exactly the model's own. The pass skips attention itself
  (:func:`qkviz.extraction.capture.recorder.without_attention`): the tables (and the position embeddings) are
  computed before it, and at thousands of positions attention would be most of the pass's time. The
  same pass gives the embedding parts.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from qkviz.store import files as run_files
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.capture.recorder import capturing, without_attention
from qkviz.extraction.capture.forward_pass import forward

logger = logging.getLogger(__name__)

#: positions of the first-layer rotation check (:func:`rotation_explained`)
ROTATION_POSITIONS = 16

def query_key_biases(module: torch.nn.Module, adapter: FamilyAdapter,
                     shape: ModelShape) -> tuple[np.ndarray | None, np.ndarray | None]:
    """One attention module's ``([head, d_head], [kv_head, d_head])`` biases, or ``None`` each (also where the
    family's projections are fused in a layout qkviz does not know: the biases then stay part of the content)."""
    if adapter.qk_norm or not adapter.has_projections:
        return None, None

    def per_head(part: int, heads: int) -> np.ndarray | None:
        _, bias = adapter.projection(module, part, shape)
        return None if bias is None else bias.detach().float().cpu().numpy().reshape(heads, shape.head_dim)

    return per_head(0, shape.n_heads), per_head(1, shape.n_kv_heads)


class UnstoredRotation(Exception):
    """Rotary tables that one ``[layer, position, rotary_dim]`` array cannot hold: as ``(cos, sin)`` in some
    attention layers only (others rotate in their own way, take their positions in another form, or do not
    rotate), or of different sizes in different layers."""


class RotaryRecorder:
    """Pre-hooks on every attention module that keep the ``cos`` and ``sin`` each layer receives in one pass
    (:meth:`tables` once it ran)."""

    def __init__(self, modules: list[torch.nn.Module]):
        self.n_layers = len(modules)
        self.seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.foreign: list[int] = []
        self.handles = [module.register_forward_pre_hook(self._hook(layer), with_kwargs=True)
                        for layer, module in enumerate(modules)]

    def _hook(self, layer: int):
        def hook(_module, args, kwargs):
            embeddings = kwargs.get("position_embeddings")
            if isinstance(embeddings, (tuple, list)) and len(embeddings) == 2:
                cos, sin = embeddings
                self.seen[layer] = (cos[0].float().cpu(), sin[0].float().cpu())
            elif embeddings is not None:       # another form (DeepSeek-V2's complex frequencies): not cos / sin
                self.foreign.append(layer)
        return hook

    def tables(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(cos, sin)`` float32 ``[layer, position, rotary_dim]`` as each layer received them, or ``None``;
        :class:`UnstoredRotation` where one array cannot hold them."""
        seen = self.seen
        if not seen and not self.foreign:
            return None
        if self.foreign or sorted(seen) != list(range(self.n_layers)):
            raise UnstoredRotation(f"rotary tables as (cos, sin) reach layers {sorted(seen)} only, of {self.n_layers}")
        if len({table.shape for pair in seen.values() for table in pair}) > 1:
            raise UnstoredRotation("rotary tables differ in size between layers")
        cos = torch.stack([seen[layer][0] for layer in range(self.n_layers)]).numpy()
        sin = torch.stack([seen[layer][1] for layer in range(self.n_layers)]).numpy()
        return cos, sin


def _one_pass(model: torch.nn.Module, handles: list, token_id: int, n_positions: int, device: str) -> None:
    """One forward pass, without attention, over ``n_positions`` copies of ``token_id``; then the hooks
    ``handles`` are removed."""
    try:
        input_ids = torch.full((1, n_positions), token_id, dtype=torch.long, device=device)
        with torch.inference_mode(), without_attention(model):
            forward(model, input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        for handle in handles:
            handle.remove()


def _first_layer_projection(attention: torch.nn.Module, adapter: FamilyAdapter, part: int, shape: ModelShape,
                            heads: int) -> np.ndarray:
    """``[head, d_head, d_model]`` weight of the first layer's query (``part`` 0) or key (1) projection."""
    weight, _ = adapter.projection(attention, part, shape)
    return weight.detach().float().cpu().numpy().reshape(heads, shape.head_dim, -1)


class EmbeddingRecorder:
    """Forward hooks that keep what the model's embeddings add in one pass (the position embeddings at
    positions ``0..P-1``, the token-type row), for :meth:`parts`."""

    def __init__(self, modules: tuple):
        self.modules = modules
        word, position, token_type, norm = modules
        self.seen: dict[str, torch.Tensor] = {}
        self.handles = [position.register_forward_hook(lambda m, i, out: self.seen.__setitem__("position", out[0]))]
        if token_type is not None:
            self.handles.append(token_type.register_forward_hook(
                lambda m, i, out: self.seen.__setitem__("type", out[0, 0])))

    def parts(self, model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape,
              used_token_ids: np.ndarray) -> dict[str, np.ndarray]:
        """What splits the first layer's queries and keys into token and position parts, for absolute-position
        models: the token embeddings of the ids the run uses, the position embeddings the model added in the pass
        (so offsets such as RoBERTa's are the model's own), the token-type row, the norm's weight, bias and eps,
        and the first layer's query and key projection weights."""
        word, _, _, norm = self.modules
        attention = adapter.attention_modules(model)[0]
        constant = self.seen["type"] if "type" in self.seen else torch.zeros(word.weight.shape[1])
        as_numpy = lambda tensor: tensor.detach().float().cpu().numpy()  # noqa: E731
        return {
            run_files.EMBED_TOKEN_IDS: np.asarray(used_token_ids, dtype=np.int64),
            run_files.EMBED_TOKENS: as_numpy(word.weight[torch.as_tensor(used_token_ids, device=word.weight.device)]),
            run_files.EMBED_POSITIONS: as_numpy(self.seen["position"]),
            run_files.EMBED_NORM: np.stack([as_numpy(constant), as_numpy(norm.weight), as_numpy(norm.bias),
                                            np.full(constant.shape[-1], float(norm.eps), dtype=np.float32)]),
            run_files.EMBED_QUERY_WEIGHT: _first_layer_projection(attention, adapter, 0, shape, shape.n_heads),
            run_files.EMBED_KEY_WEIGHT: _first_layer_projection(attention, adapter, 1, shape, shape.n_kv_heads),
        }


def bias_parts(model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape) -> dict[str, np.ndarray]:
    """``{run file: array}`` of the query and key biases, where every layer has them (image models: all there is)."""
    biases = [query_key_biases(module, adapter, shape) for module in adapter.attention_modules(model)]
    parts: dict[str, np.ndarray] = {}
    if all(query is not None for query, _ in biases):
        parts[run_files.QUERY_BIAS] = np.stack([query for query, _ in biases]).astype(np.float32)
    if all(key is not None for _, key in biases):
        parts[run_files.KEY_BIAS] = np.stack([key for _, key in biases]).astype(np.float32)
    return parts


class _FirstLayerQueries:
    """A recorder keeping the queries of one attention module (the first layer's)."""

    def __init__(self, module: torch.nn.Module):
        self.module, self.queries = module, None

    def record(self, module, query, key, value, scaling, kwargs) -> None:
        if module is self.module and self.queries is None:      # a shared layer's first call is the first layer
            self.queries = query.detach()[0].double().cpu()     # [head, position, d]



def rotation_explained(model: torch.nn.Module, first: torch.nn.Module, tables: tuple[np.ndarray, np.ndarray] | None,
                       token_id: int, device: str) -> bool:
    """Whether what positions do to the first layer's queries is explained: one token repeated at
    :data:`ROTATION_POSITIONS` positions gives every position the same layer input (rotary models), so its query
    at position ``p`` must be its query at position 0 rotated by the recorded tables (the ``rotate_half``
    convention on the first ``rotary_dim`` sizes, which :func:`qkviz.analysis.logits.logit_decomposition.unrotate`
    inverts). Queries that change with position but keep their norm are rotated by a convention qkviz does not
    invert (interleaved pairs, the rotary part last) or inside the model's own code: ``False``. Queries that do
    not change, or change their norm too (absolute position embeddings), need no rotary split: ``True``."""
    recorder = _FirstLayerQueries(first)
    input_ids = torch.full((1, ROTATION_POSITIONS), token_id, dtype=torch.long, device=device)
    with torch.inference_mode(), capturing(model, recorder):
        forward(model, input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    positions = ROTATION_POSITIONS if tables is None else min(ROTATION_POSITIONS, tables[0].shape[1])
    queries = recorder.queries[:, :positions]
    size = float(queries.abs().max()) or 1.0
    if float((queries - queries[:, :1]).abs().max()) <= 1e-5 * size:
        return True                                      # no position in the first layer's queries
    norms = queries.norm(dim=-1)
    if float((norms - norms[:, :1]).abs().max()) > 1e-4 * float(norms.max()):
        return True                                      # positions added, not rotated (absolute embeddings)
    if tables is None:
        return False
    cos, sin = (torch.from_numpy(table[0, :positions]).double() for table in tables)
    rotary, half = cos.shape[-1], cos.shape[-1] // 2
    start = queries[:, :1, :rotary]                      # position 0: cos 1, sin 0
    turned = torch.cat([-start[..., half:], start[..., :half]], dim=-1)
    expected = torch.cat([start * cos + turned * sin, queries[:, :1, rotary:].expand(-1, positions, -1)], -1)
    return float((queries - expected).abs().max()) <= 1e-4 * size


def capture_logit_parts(model: torch.nn.Module, adapter: FamilyAdapter, shape: ModelShape, n_positions: int,
                        pad_id: int, device: str, used_token_ids: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``{run file: array}`` of the biases, rotary tables and first-layer embedding parts the model has. Where the
    rotation of queries and keys is not one qkviz can invert (:func:`rotation_explained`), no rotary table and no
    bias is kept, and :data:`~qkviz.store.files.POSITION_UNSPLIT` says the logit is not split by position.

    The rotary tables and the embedding parts (absolute-position models, where the biases are kept) come from one
    pass without attention over ``n_positions`` copies of one token the run uses (not the padding id: RoBERTa
    numbers positions from its non-padding tokens; the rotary tables depend on positions only)."""
    modules = adapter.attention_modules(model)
    parts = bias_parts(model, adapter, shape)
    rotary = RotaryRecorder(modules)
    embedding_modules = (adapter.embedding_modules(model)
                         if used_token_ids is not None and run_files.QUERY_BIAS in parts else None)
    embeddings = EmbeddingRecorder(embedding_modules) if embedding_modules is not None else None
    filler = pad_id
    if used_token_ids is not None and len(used_token_ids):
        filler = int(next((t for t in used_token_ids if t != pad_id), used_token_ids[0]))
    _one_pass(model, rotary.handles + (embeddings.handles if embeddings is not None else []), filler, n_positions,
              device)
    try:
        tables = rotary.tables()
    except UnstoredRotation as unstored:
        logger.info("%s: %s; its logits are not split by position", adapter.family, unstored)
        return {run_files.POSITION_UNSPLIT: np.ones(1, dtype=np.int8)}
    first = int(used_token_ids[0]) if used_token_ids is not None and len(used_token_ids) else pad_id
    if adapter.modality == "text" and not rotation_explained(model, modules[0], tables, first, device):
        logger.info("%s rotates queries and keys in a way qkviz does not invert: its logits are not split by "
                    "position", adapter.family)
        return {run_files.POSITION_UNSPLIT: np.ones(1, dtype=np.int8)}
    if tables is not None:
        parts[run_files.ROTARY_COS], parts[run_files.ROTARY_SIN] = tables
    if embeddings is not None:
        parts.update(embeddings.parts(model, adapter, shape, used_token_ids))
    logger.debug("logit parts: %s", sorted(parts))
    return parts
