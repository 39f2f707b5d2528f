"""What an architecture family adapter declares.

Every supported family's attention is captured where its queries meet its keys (the Hugging Face attention
interface, or a declared method or own code: see :mod:`qkviz.extraction.capture.recorder`), so an adapter only says where
each layer's attention module lives (a shared module once per layer it serves), how
the family names its head counts, how long an input it accepts, and which variants of the
family change the logit beyond ``scale * q . k`` (those are refused with a clear message).
Shapes follow ``[layer, head, token, d_head]``.

A declared adapter is part of its family's declaration (:mod:`qkviz.extraction.families`); a family found from its
structure gets one from :mod:`qkviz.extraction.adapters.discovery`. Plain Python: torch only in annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch

#: BigBird's ``attention_type`` where it attends to a window, global and random blocks of keys
BLOCK_SPARSE = "block_sparse"


def full_attention_span(config) -> int | None:
    """The longest sequence a block-sparse BigBird attends to in full, or None where the configuration is not
    block-sparse (:mod:`qkviz.extraction.capture.block_sparse`)."""
    if getattr(config, "attention_type", None) != BLOCK_SPARSE:
        return None
    return (5 + 2 * int(config.num_random_blocks)) * int(config.block_size)


def span_name(config) -> str:
    """How a refusal names the limit :func:`full_attention_span` sets."""
    return (f"the {full_attention_span(config):,} tokens within which BigBird's own code replaces its block-sparse "
            "attention (a mask qkviz does not store) by full attention")


@dataclass(frozen=True)
class ModelShape:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    #: the size of a head's values (its output), where it differs from the query / key size (latent attention)
    value_dim: int | None = None

    def kv_head_of(self, head: int) -> int:
        """The key-value head that serves query head ``head`` (grouped-query attention)."""
        return head // (self.n_heads // self.n_kv_heads)


@dataclass(frozen=True)
class EmbeddingPaths:
    """Where an absolute-position model keeps what its first layer's input is made of (attribute paths
    from the base model): token and position embeddings, the token-type embedding if any, and the norm
    applied to their sum before the first attention."""

    tokens: str
    positions: str
    token_types: str | None
    norm: str


@dataclass(frozen=True)
class FamilyAdapter:
    """How qkviz reaches the attention of one architecture family."""

    family: str
    #: a declared adapter's: the model types whose declarations name it (:mod:`qkviz.extraction.families.catalogue`)
    model_types: tuple[str, ...]
    #: Attribute path from the base model to the list of layers, e.g. ``"encoder.layer"``.
    layers_path: str
    #: Attribute path from one layer to its attention module (the one that calls the interface); empty where the
    #: numbered entries are the attention modules themselves (XLM's ``attentions`` list).
    attention_path: str
    causal: bool
    description: str
    #: Attribute path from one layer to the attention's output projection (its input is every head's
    #: output side by side): an ``nn.Linear`` or GPT-2's ``Conv1D``.
    output_projection_path: str = "self_attn.o_proj"
    #: Attribute paths from the attention module to its query and key projections (``nn.Linear``).
    query_projection_path: str = "q_proj"
    key_projection_path: str = "k_proj"
    #: GPT-2: one fused query/key/value projection (``Conv1D``, ``y = x @ W``) instead of the two above.
    fused_projection_path: str | None = None
    #: The output projection is a ``Conv1D`` (``y = x @ W``) rather than an ``nn.Linear`` (``y = x @ W.T``).
    conv1d_output: bool = False
    #: A norm follows the query / key projections (Gemma 3), so a stored vector is not projection + bias.
    qk_norm: bool = False
    #: Absolute-position models: where the first layer's input parts live (``None`` for rotary families).
    embeddings: EmbeddingPaths | None = None
    #: Positions reserved by the family below ``max_position_embeddings`` (RoBERTa's padding offset).
    reserved_positions: Callable[[object], int] = lambda config: 0
    #: Returns a reason the configuration cannot be captured exactly, or ``None``.
    unsupported_reason: Callable[[object], str | None] = lambda config: None
    architectures: tuple[str, ...] = field(default=())
    #: ``"text"`` (token ids in) or ``"image"`` (pixel values in; :mod:`qkviz.extraction.streaming.image_capture`).
    modality: str = "text"
    #: Image families: the names of the special tokens before the patches, in sequence order (CLS,
    #: distillation, registers); the patches follow row by row.
    prefix_tokens: Callable[[object], tuple[str, ...]] = lambda config: ()
    #: the model layers that have attention, where not all do (a model mixing attention with linear-attention or
    #: state-space layers); ``None``: every layer
    layer_indices: tuple[int, ...] | None = None
    #: found from the model itself (:mod:`qkviz.extraction.adapters.discovery`): its shape as captured
    discovered_shape: ModelShape | None = None
    discovered: bool = False

    def shape(self, config) -> ModelShape:
        if self.discovered_shape is not None:
            return self.discovered_shape
        config = config.get_text_config()
        n_heads = int(config.num_attention_heads)
        n_kv_heads = int(getattr(config, "num_key_value_heads", None) or n_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
        return ModelShape(int(config.num_hidden_layers), n_heads, n_kv_heads, int(head_dim))

    def max_tokens_per_sequence(self, config) -> int | None:
        """The longest sequence qkviz passes: the model's context, or a block-sparse BigBird's full-attention span
        where that is shorter (:func:`full_attention_span`)."""
        if self.modality == "image":
            return None
        limit = getattr(config.get_text_config(), "max_position_embeddings", None)
        context = None if limit is None else int(limit) - self.reserved_positions(config)
        span = full_attention_span(config)
        return context if span is None or (context is not None and context <= span) else span

    def sequence_limit_name(self, config) -> str | None:
        """How a refusal of a longer document names :meth:`max_tokens_per_sequence`'s limit; None: the model's
        context."""
        span = full_attention_span(config)
        return span_name(config) if span is not None and span == self.max_tokens_per_sequence(config) else None

    def attention_modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The attention module of every layer, in layer order."""
        return [_follow(layer, self.attention_path) for layer in self.layer_modules(model)]

    def layer_modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """Every decoder / encoder layer with attention, in order."""
        layers = list(_follow(_base_model(model), self.layers_path))
        return layers if self.layer_indices is None else [layers[index] for index in self.layer_indices]

    @property
    def has_projections(self) -> bool:
        """Whether the query and key projections are known (a fused or unrecognised one is not)."""
        return bool(self.fused_projection_path or (self.query_projection_path and self.key_projection_path))

    @property
    def has_output_projection(self) -> bool:
        return bool(self.output_projection_path)

    def output_projections(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The output projection of every layer's attention, in layer order."""
        return [_follow(layer, self.output_projection_path) for layer in self.layer_modules(model)]

    def projection(self, attention: torch.nn.Module, part: int,
                   shape: ModelShape) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The query (``part`` 0) or key (1) projection of one attention module as ``(weight [out, in],
        bias [out] or None)``, ``out`` being heads x d_head."""
        if self.fused_projection_path is not None:
            fused = _follow(attention, self.fused_projection_path)   # Conv1D: y = x @ W, W [in, 3 * width]
            width = shape.n_heads * shape.head_dim
            columns = slice(part * width, (part + 1) * width)
            bias = None if fused.bias is None else fused.bias[columns]
            return fused.weight[:, columns].T, bias
        projection = _follow(attention, (self.query_projection_path, self.key_projection_path)[part])
        return projection.weight, getattr(projection, "bias", None)

    def output_head_slices(self, model: torch.nn.Module, shape: ModelShape) -> list[torch.Tensor]:
        """Per layer, ``[head, d_head, d_model]``: the rows of the output projection each head's output meets."""
        slices = []
        for projection in self.output_projections(model):
            weight = projection.weight.detach().float()
            per_input = weight if self.conv1d_output else weight.T     # [heads x d_value, d_model]
            slices.append(per_input.reshape(shape.n_heads, shape.value_dim or shape.head_dim, -1))
        return slices

    def embedding_modules(self, model: torch.nn.Module) -> tuple | None:
        """``(tokens, positions, token_types or None, norm)`` modules, or ``None`` without :attr:`embeddings`."""
        if self.embeddings is None:
            return None
        base, paths = _base_model(model), self.embeddings
        token_types = None if paths.token_types is None else _follow(base, paths.token_types)
        return _follow(base, paths.tokens), _follow(base, paths.positions), token_types, _follow(base, paths.norm)



def _base_model(model: torch.nn.Module) -> torch.nn.Module:
    base = getattr(model, "base_model", model)
    # Gemma 3 and similar wrap the text decoder in a language_model attribute.
    return getattr(base, "language_model", base)


def _follow(obj, path: str):
    """``obj.a.b`` for ``"a.b"``; ``obj`` itself for ``""`` (a layer that is its attention module)."""
    for name in filter(None, path.split(".")):
        obj = getattr(obj, name)
    return obj
