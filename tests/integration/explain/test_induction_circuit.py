"""A known finding reproduced on the bundled SmolLM2 from qkviz's own choices: its strongest induction head reads its
keys from an earlier previous-token head (K-composition, the induction circuit).

The text is held out: two lines of data/classics.txt chosen by their line numbers before any result was seen (lines
201-202), written twice in one sequence. The heads are qkviz's choice: ``copying_scores`` ranks every head by
induction and previous-token attention over the run. The key-side parts of one induction pair are also checked
against an independent split: the model's own forward pass with the part removed from the stream entering the layer
(RMSNorm divisor held), whose logit must fall by exactly the part's contribution.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import qkviz
from qkviz.analysis import copying_scores
from qkviz.analysis.statistics.induction_scores import induction_targets
from qkviz.probes import run_model
from qkviz.probes.model_on_demand import sequence_ids
from qkviz.extraction.adapters import model_adapter
from qkviz.extraction.capture.recorder import AttentionRecorder, LayerCalls, capturing
from qkviz.extraction.residual.residual_parts import ResidualTrace
from support import REPO

#: the held-out lines (0-based 200 and 201 of data/classics.txt)
LINES = slice(200, 202)
#: a previous-token head pays at least this mean attention to the token before each query
PREVIOUS_TOKEN = 0.5


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    passage = " ".join((REPO / "data" / "classics.txt").read_text(encoding="utf-8").splitlines()[LINES])
    run = qkviz.extract("smollm2", [passage + " " + passage], tmp_path_factory.mktemp("induction") / "run",
                        progress=False)
    return run, copying_scores(run)


def test_the_strongest_induction_heads_keys_come_from_an_earlier_previous_token_head(repeated):
    run, scores = repeated
    induction = scores.sort_values("induction", ascending=False).iloc[0]
    layer, head = int(induction["layer"]), int(induction["head"])
    assert induction["induction"] > 0.3 and induction["n_induction_queries"] >= 20
    circuit = run.circuit(layer, head)
    assert circuit.sample["whole_run"]
    keys = circuit.table[circuit.table.side == "key"]
    strongest = str(keys.iloc[keys.contribution.abs().argmax()].part)
    assert strongest.startswith("L") and "." not in strongest, (strongest, keys.head())
    source_layer, source_head = (int(text) for text in strongest[1:].split("H"))
    source = scores[(scores.layer == source_layer) & (scores["head"] == source_head)].iloc[0]
    assert source_layer < layer and source["previous_token"] >= PREVIOUS_TOKEN, (strongest, source)


def test_one_induction_pairs_key_parts_equal_the_models_own_ablation(repeated):
    run, scores = repeated
    induction = scores.sort_values("induction", ascending=False).iloc[0]
    layer, head = int(induction["layer"]), int(induction["head"])
    ids = sequence_ids(run, 0)
    query_position, followers = induction_targets(ids)[len(induction_targets(ids)) // 2]
    key_position = followers[0]
    table = run.explain(layer, head, query_position, key_position, by="key")
    model = run_model(run)
    adapter = model_adapter(model)
    trace = ResidualTrace(model, adapter, adapter.shape(model.config), torch.as_tensor(np.array(ids))[None],
                          [key_position], up_to_layer=layer)
    stream = trace.parts_entering(layer)
    full = _own_logit(model, adapter, ids, layer, head, query_position, key_position, run.scale(layer))
    checked = []
    for part in list(table.part[table.part.str.match(r"^L\d+H\d+$")].iloc[:2]) + ["embed"]:
        vector = stream.vectors[stream.names.index(part)][0]
        ablated = _own_logit(model, adapter, ids, layer, head, query_position, key_position, run.scale(layer),
                             removed=vector)
        contribution = float(table.contribution[table.part == part].iloc[0])
        assert abs((full - ablated) - contribution) <= 1e-3 * max(1.0, abs(full)), (part, full - ablated,
                                                                                      contribution)
        checked.append(part)
    assert len(checked) == 3


def _own_logit(model, adapter, ids, layer, head, query_position, key_position, scale, removed=None) -> float:
    """SmolLM2's own logit (queries and keys captured as it runs); with ``removed``, that vector taken from the
    stream entering ``layer`` at the key's position, the RMSNorm's divisor there held at its real value."""
    layer_module = adapter.layer_modules(model)[layer]
    norm = layer_module.input_layernorm
    kept, seen, hooks = {}, {}, []

    def keep(_module, inputs, _out):
        seen.setdefault("x", inputs[0][0, key_position].double().clone())

    def subtract(_module, args, kwargs):
        hidden = (args[0] if args else kwargs["hidden_states"]).clone()
        hidden[0, key_position] -= removed.to(hidden.dtype)
        return ((hidden, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": hidden})

    def fixed(_module, inputs, out):
        x = seen["x"]
        sigma = torch.sqrt((x * x).mean() + norm.variance_epsilon)
        out = out.clone()
        out[0, key_position] = (norm.weight.double() * inputs[0][0, key_position].double() / sigma).to(out.dtype)
        return out

    def sink(index, queries, keys, _values):
        if index == layer:
            kv_head = adapter.shape(model.config).kv_head_of(head)
            kept["q"], kept["k"] = queries[0, head, query_position].double(), keys[0, kv_head, key_position].double()

    input_ids = torch.as_tensor(np.array(ids))[None]
    hooks.append(norm.register_forward_hook(keep))
    if removed is not None:
        with torch.inference_mode():            # the divisor of the unchanged stream first
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
        hooks += [layer_module.register_forward_pre_hook(subtract, with_kwargs=True), norm.register_forward_hook(fixed)]
    try:
        with torch.inference_mode(), capturing(model, AttentionRecorder(LayerCalls(adapter.attention_modules(model)),
                                                                        sink)):
            model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids))
    finally:
        for hook in hooks:
            hook.remove()
    return scale * float(kept["q"] @ kept["k"])
