"""The value side of a head's circuit (V-composition), on a tiny random Llama.

* The value side's parts add up to ``mean_moved``, and ``mean_moved`` is what an independent computation from the
  model's own pass gives: its values and attention at the layer, and the head's slice of ``o_proj``,
  ``sum a_ij |W_O v_j| / sum a_ij`` (and the run's stored ``output_norms`` give the same).
* Removing one part from the stream entering the layer (at every position, the input norm's divisor held at its
  real value) changes the model's own values; that change through ``W_O``, projected on what the head moves from
  each key and weighted by attention, is the part's contribution.
* ``qkviz stats --circuits`` keeps the value side; ``composition_edges`` returns V-edges, with its ``kinds``,
  ``minimum`` and ``sides`` filters; circuits stored before the value side (schema 1) are refused in one line.
"""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
import torch

import qkviz
from qkviz.core.attention import attention_probs
from qkviz.explain import composition_edges, load_circuits
from qkviz.extraction.adapters import model_adapter
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.residual.residual_parts import ResidualTrace
from qkviz.probes.model_on_demand import sequence_ids
from qkviz.store import files as run_files
from support import CORPUS
from support.cli import run_main
from support.family_configs import tiny_family_model
from support.tiny_models import decoder_tokenizer

LINES = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line][:8]
LAYER, HEAD = 1, 2


def _bound(total: float) -> float:
    return 1e-4 * max(1.0, abs(total))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    model = tiny_family_model("llama")
    run = qkviz.extract(model, LINES, tmp_path_factory.mktemp("llama") / "run", tokenizer=decoder_tokenizer(LINES),
                        progress=False)
    return model, run


def _own_pass(model, ids, layer: int, removed: torch.Tensor | None = None, held: torch.Tensor | None = None):
    """The model's own queries ``[head, token, d]``, keys and values ``[kv_head, token, d]`` at ``layer`` and the
    input norm's real divisor ``[token, 1]``; with ``removed`` ``[token, width]`` subtracted from the stream entering
    the layer and the input norm's divisor held at ``held``."""
    adapter = model_adapter(model)
    layer_module = adapter.layer_modules(model)[layer]
    norm = layer_module.input_layernorm
    kept, hooks = {}, []

    def keep_divisor(_module, inputs, _out):
        x = inputs[0][0].double()
        kept["divisor"] = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)

    hooks.append(norm.register_forward_hook(keep_divisor))
    if removed is not None:
        def subtract(_module, args, kwargs):
            hidden = (args[0] if args else kwargs["hidden_states"]).clone()
            hidden[0] -= removed.to(hidden.dtype)
            return ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})

        def fixed(_module, inputs, out):
            return (norm.weight.double() * inputs[0].double() / held[None]).to(out.dtype)

        hooks += [layer_module.register_forward_pre_hook(subtract, with_kwargs=True), norm.register_forward_hook(fixed)]

    def sink(index, queries, keys, _norms):
        if index == layer:
            kept["q"], kept["k"] = queries[0].double(), keys[0].double()

    def values(index, value):
        if index == layer:
            kept["v"] = value[0].double()

    input_ids = torch.as_tensor(np.array(ids))[None]
    try:
        with torch.inference_mode(), capturing(model, AttentionRecorder(LayerCalls(adapter.attention_modules(model)),
                                                                        sink, values)):
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        for hook in hooks:
            hook.remove()
    return kept["q"], kept["k"], kept["v"], kept["divisor"]


def test_the_value_side_adds_up_and_each_part_is_the_models_own_ablation(llama):
    model, run = llama
    circuit = run.circuit(LAYER, HEAD, model=model, budget=1, seed=2)
    assert len(circuit.sample["sentences"]) == 1
    values = circuit.table[circuit.table.side == "value"]
    assert values.lift.isna().all() and len(values) > 5
    assert abs(values.contribution.sum() - circuit.mean_moved) <= _bound(circuit.mean_moved)
    assert "; its values from " in circuit.summary
    # the model's own pass: attention of the head, its values, its slice of the output projection
    ids = sequence_ids(run, circuit.sample["sentences"][0])
    adapter = model_adapter(model)
    shape = adapter.shape(model.config)
    q, k, v, divisor = _own_pass(model, ids, LAYER)
    kv = shape.kv_head_of(HEAD)
    probs = attention_probs(q[HEAD].numpy(), k[kv].numpy(), run.logit_rule(LAYER, HEAD)).astype(np.float64)
    d = v.shape[-1]
    output = adapter.layer_modules(model)[LAYER].self_attn.o_proj.weight.detach().double()[:, HEAD * d:(HEAD + 1) * d]
    moved = v[kv] @ output.T                                                           # [token, width]
    length = moved.norm(dim=-1)
    unit = (moved / length[:, None]).numpy()
    mean_moved = float((probs * length.numpy()[None]).sum() / probs.sum())
    assert abs(circuit.mean_moved - mean_moved) <= _bound(mean_moved), (circuit.mean_moved, mean_moved)
    stored = run.output_norms(LAYER, HEAD)[run.sentence_tokens(circuit.sample["sentences"][0])]   # what extraction kept
    assert abs(float((probs * stored[None]).sum() / probs.sum()) - mean_moved) <= 1e-4 * mean_moved
    # each part: the model's own values less those with the part removed (divisor held), moved and projected
    trace = ResidualTrace(model, adapter, shape, torch.as_tensor(np.array(ids))[None], list(range(len(ids))),
                          up_to_layer=LAYER)
    stream = trace.parts_entering(LAYER)
    checked = []
    for part in ("L0H1", "L0.mlp", "embed"):
        _q, _k, ablated, _ = _own_pass(model, ids, LAYER, removed=stream.vectors[stream.names.index(part)],
                                       held=divisor)
        share = ((v[kv] - ablated[kv]) @ output.T).numpy()                               # [token, width]
        expected = float((probs * np.sum(share * unit, axis=1)[None]).sum() / probs.sum())
        contribution = float(values.contribution[values.part == part].iloc[0])
        assert abs(expected - contribution) <= _bound(mean_moved), (part, expected, contribution)
        checked.append(part)
    assert len(checked) == 3


def test_stats_keeps_the_value_side_and_the_graph_has_v_edges(tiny_run, tmp_path, caplog):
    run = qkviz.open_run(shutil.copytree(tiny_run("llama").path, tmp_path / "run"))
    done = run_main("-q", "stats", "--run", str(run.path), "--circuits", "--circuit-budget", "60")
    assert done.returncode == 0, done.stderr
    circuits = qkviz.open_run(run.path).circuits
    assert set(circuits.side) == {"query", "key", "value"}
    for (layer, head), one in circuits.groupby(["layer", "head"]):
        values = one[one.side == "value"]
        assert abs(values.contribution.sum() - values.mean_moved.iloc[0]) <= _bound(values.mean_moved.iloc[0])
    edges = composition_edges(circuits)
    assert set(edges.side) == {"query", "key", "value"} and (edges.source_layer < edges.target_layer).all()
    v_edges = composition_edges(circuits, sides=("value",))
    assert len(v_edges) and set(v_edges.side) == {"value"}
    mlps = composition_edges(circuits, sides=("value",), kinds=("mlp",))
    assert len(mlps) and set(mlps.source) == {"L0.mlp"} and (mlps.source_head == -1).all()
    high = float(v_edges.weight.abs().median())
    strong = composition_edges(circuits, sides=("value",), minimum=high)
    assert 0 < len(strong) < len(v_edges) and (strong.weight.abs() >= high).all()
    assert composition_edges(circuits, by="lift", sides=("value",)).empty        # the value side has no lift
    with pytest.raises(ValueError, match="sides must be among"):
        composition_edges(circuits, sides=("values",))
    # circuits stored before the value side: not read, one line says how to remake them
    marker = run.path / run_files.CIRCUITS_DIRECTORY / run_files.CIRCUITS_MARKER
    old = json.loads(marker.read_text(encoding="utf-8"))
    marker.write_text(json.dumps({**old, "schema_version": 1}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert load_circuits(qkviz.open_run(run.path)) is None
    lines = [record.getMessage() for record in caplog.records if "circuits" in record.getMessage()]
    assert len(lines) == 1 and "qkviz stats --circuits" in lines[0] and "\n" not in lines[0]
