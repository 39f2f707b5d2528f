"""Finding a text model's attention from the model itself, for a family qkviz has no declaration for.

One forward pass over a few tokens runs with qkviz's capture implementation (:mod:`qkviz.extraction.capture.recorder`)
and a :class:`CallLog` that notes every module calling the attention interface, in call order. Their
qualified names give the layer list and the attention's place in a layer (``layers.3.self_attn`` ->
``layers``, index 3, ``self_attn``); the captured tensors give the head counts and sizes. Where a model mixes
attention and other layers (linear attention, state-space blocks), only the layers that call attention are
kept (:attr:`FamilyAdapter.layer_indices`) and the run says which. A module that runs once per layer (ALBERT's
shared layer) serves each layer in call order; a module that calls attention more often than it runs (several
attentions per layer) is refused. Attention modules kept in a list of their own (XLM's ``attentions.3``) are
their layers' entries themselves (an empty attention path).

What discovery cannot see, whether the model adds a term to the logit that ``q . k`` cannot express, is
left to the exactness gate (:mod:`qkviz.extraction.gate.exactness_gate`), which every extraction passes first.
"""

from __future__ import annotations

import inspect

import re
from collections import Counter
from dataclasses import dataclass, field

import torch

from qkviz.core.errors import QkvizError
from qkviz.extraction.capture.recorder import capturing
from qkviz.extraction.capture.forward_pass import forward
from qkviz.extraction.families.adapter import FamilyAdapter, ModelShape, _base_model, _follow

#: the refusal of a family whose attention does not go through transformers' attention interface
OWN_CODE = "no layer calls transformers' attention interface (its attention is computed by its own code)"
#: the refusal of a model with no attention at all
NO_ATTENTION = "no attention layer at all (a state-space or recurrent model)"
#: the refusal of a family whose attention module computes several attentions each time it runs
SEVERAL_PER_LAYER = "one attention module calls attention several times each time it runs (several attentions per layer)"
#: the refusal of a model whose forward pass reads something else than token ids (Whisper's speech encoder-decoder)
OTHER_INPUTS = "reads {reads}, not the token ids qkviz passes"

#: a layer's attention output projection, by the names families give it (inside the attention module)
OUTPUT_PROJECTION_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "wo", "Wo", "out_lin", "o")
#: separate query and key projections, by the names families give them
QUERY_KEY_NAMES = (("q_proj", "k_proj"), ("query", "key"), ("q_lin", "k_lin"), ("wq", "wk"), ("q", "k"))
#: a norm applied to queries or keys after their projection (QK-norm)
QK_NORM_PATTERN = re.compile(r"^(q|k|query|key)_?(layer)?_?norm$|^(q|k)_ln$")
#: ``layers.3.self_attn``; or ``attentions.3``: the attention modules in a list of their own (XLM, FlauBERT), the
#: numbered entry being the attention itself (an empty attention path)
_LAYER_NAME = re.compile(r"^(?P<layers>.+)\.(?P<index>\d+)(\.(?P<attention>[^\d].*))?$")
PROBE_IDS = 12


@dataclass
class CallLog:
    """Every attention call of one forward pass: the calling modules in order and what they passed."""

    modules: list[torch.nn.Module] = field(default_factory=list)
    shapes: list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    causal: list[bool] = field(default_factory=list)
    #: how often each module's forward ran (by id): a module calling attention more often than it runs computes
    #: several attentions per layer, a module running several times is a shared layer
    forward_calls: dict[int, int] = field(default_factory=dict)

    def count_forward(self, module, _args) -> None:
        self.forward_calls[id(module)] = self.forward_calls.get(id(module), 0) + 1

    def record(self, module, query, key, value, scaling, kwargs) -> None:
        self.modules.append(module)
        self.shapes.append((tuple(query.shape), tuple(key.shape), tuple(value.shape)))
        causal = kwargs.get("is_causal")
        self.causal.append(bool(getattr(module, "is_causal", False) if causal is None else causal))



def discover_adapter(model: torch.nn.Module, family: str) -> FamilyAdapter:
    """A :class:`FamilyAdapter` for ``model`` found from its structure, or a one-line :class:`QkvizError` saying
    why its attention cannot be reached."""
    base = _base_model(model)
    if not _reads_token_ids(model):        # Whisper's WhisperModel: its text decoder alone is WhisperForCausalLM
        reads = getattr(model, "main_input_name", "input_ids")
        raise QkvizError(f"{family}: {type(model).__name__} {OTHER_INPUTS.format(reads=reads)}; extract the "
                         "family's text decoder alone where transformers registers one (its causal language model)")
    log = _probe(model)
    if not log.modules:
        if not any("attention" in type(module).__name__.lower() for module in base.modules()):
            raise QkvizError(f"{family}: {NO_ATTENTION}: there are no queries and keys to extract")
        raise QkvizError(f"{family}: {OWN_CODE}, so qkviz cannot capture its queries and keys")
    attention_calls = Counter(id(module) for module in log.modules)
    if any(calls > log.forward_calls.get(key, 0) > 0 for key, calls in attention_calls.items()):
        raise QkvizError(f"{family}: {SEVERAL_PER_LAYER}; qkviz needs one attention call per layer")
    shared = any(calls > 1 for calls in attention_calls.values())
    names = {id(module): name for name, module in base.named_modules()}
    call_names = [names.get(id(module), "") for module in log.modules]
    if not all(_LAYER_NAME.match(name) for name in call_names):
        where = ", ".join(sorted({names.get(id(m), type(m).__name__) for m in log.modules}))
        raise QkvizError(f"{family}: attention modules outside a layer list ({where}); qkviz needs one attention "
                         "per numbered layer")
    places = _layer_places(call_names)
    if places is None:
        where = ", ".join(sorted(set(call_names)))
        raise QkvizError(f"{family}: attention at different places ({where}: e.g. cross-attention beside "
                         "self-attention); qkviz extracts one self-attention per layer")
    layers_path, indices, attention_path = places
    # a shared layer (ALBERT): the run's layer i is the i-th call, so the model layer of each run layer is in call order
    indices = indices if shared else tuple(sorted(indices))
    n_model_layers = len(_follow(base, layers_path))
    shape = _shape(family, log)
    attention = log.modules[0]
    qk_names = next(((q, k) for q, k in QUERY_KEY_NAMES if _is_linear(attention, q) and _is_linear(attention, k)),
                    None)
    heads_width = shape.n_heads * (shape.value_dim or shape.head_dim)     # every head's output side by side
    output_name = next((name for name in OUTPUT_PROJECTION_NAMES
                        if _is_linear(attention, name) and getattr(attention, name).in_features == heads_width), None)
    output_path = ".".join(part for part in (attention_path, output_name) if part) if output_name else \
        _sibling_output(_follow(base, layers_path)[indices[0]], attention_path, heads_width)
    qk_norm = any(QK_NORM_PATTERN.match(name) for name, _ in attention.named_children())
    return FamilyAdapter(
        family=family,
        model_types=(family,),
        layers_path=layers_path,
        attention_path=attention_path,
        causal=log.causal[0],
        description=f"{type(base).__name__}: found from the model's structure",
        output_projection_path=output_path,
        query_projection_path=qk_names[0] if qk_names else "",
        key_projection_path=qk_names[1] if qk_names else "",
        qk_norm=qk_norm,
        layer_indices=None if indices == tuple(range(n_model_layers)) else indices,
        discovered_shape=shape,
        discovered=True,
    )


def _reads_token_ids(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward pass reads token ids: its main input is ``input_ids``, or its forward takes them
    (by name, or passes every argument on: Whisper's decoder wrapper, whose main input is still its family's audio
    features)."""
    if getattr(model, "main_input_name", "input_ids") == "input_ids":
        return True
    parameters = inspect.signature(model.forward).parameters.values()
    return any(p.name == "input_ids" or p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)


def _probe(model: torch.nn.Module) -> CallLog:
    """One forward pass over :data:`PROBE_IDS` tokens, noting every attention call."""
    log = CallLog()
    counting = [module.register_forward_pre_hook(log.count_forward) for module in model.modules()]
    parameter = next(model.parameters())
    vocab = int(getattr(model.config.get_text_config(), "vocab_size", 0) or 0)
    ids = torch.arange(PROBE_IDS, device=parameter.device)[None] % max(vocab, 1) + (1 if vocab > PROBE_IDS + 1 else 0)
    # a failure of the model's own code here is refused by the extraction's boundary
    # (qkviz.extraction.models.model_boundary), which names this step
    try:
        with torch.inference_mode(), capturing(model, log):
            forward(model, input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for handle in counting:
            handle.remove()
    return log


def _layer_places(call_names: list[str]) -> tuple[str, tuple[int, ...], str] | None:
    """``(layer list, each call's index in it, the attention's path in a layer)``, where every call's module name
    splits the same way at one numbered part: the last such part (``layers.3.self_attn``); an earlier one where the
    last does not give one layer list (ALBERT's layer groups: ``albert_layer_groups.1.albert_layers.0.attention``
    splits at the group). None where no part does."""
    parts = [name.split(".") for name in call_names]
    if len({len(split) for split in parts}) != 1:
        return None
    for position in reversed(range(1, len(parts[0]))):
        if not all(split[position].isdigit() for split in parts):
            continue
        layers = {".".join(split[:position]) for split in parts}
        attention = {".".join(split[position + 1:]) for split in parts}
        if len(layers) == 1 and len(attention) == 1:
            return layers.pop(), tuple(int(split[position]) for split in parts), attention.pop()
    return None


def _shape(family: str, log: CallLog) -> ModelShape:
    """Heads, key-value heads and the query / key size, the same in every attention layer."""
    sizes = {(query[1], key[1], query[3], key[3], value[3]) for query, key, value in log.shapes}
    if len(sizes) > 1:
        raise QkvizError(f"{family}: attention layers differ in head count or size ({sorted(sizes)}); qkviz needs "
                         "the same heads in every layer")
    n_heads, n_kv_heads, query_dim, key_dim, value_dim = sizes.pop()
    if query_dim != key_dim or n_heads % n_kv_heads:
        raise QkvizError(f"{family}: queries of size {query_dim} x {n_heads} heads meet keys of size {key_dim} x "
                         f"{n_kv_heads}; qkviz needs q . k per head")
    return ModelShape(len(log.modules), n_heads, n_kv_heads, query_dim, value_dim)


def _sibling_output(layer: torch.nn.Module, attention_path: str, heads_width: int) -> str:
    """The output projection of a BERT-layout layer, beside its attention module rather than in it
    (``attention.output.dense`` next to ``attention.self``): its path from the layer, or ``""``."""
    parent = attention_path.rpartition(".")[0]
    path = ".".join(part for part in (parent, "output", "dense") if part)
    try:
        module = layer.get_submodule(path)
    except AttributeError:
        return ""
    return path if isinstance(module, torch.nn.Linear) and module.in_features == heads_width else ""


def _is_linear(module: torch.nn.Module, name: str) -> bool:
    return isinstance(getattr(module, name, None), torch.nn.Linear)
