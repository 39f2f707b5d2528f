"""``--head-update``: each head's update relative to the hidden state, against the model's own tensors."""

import numpy as np
import pytest
import torch
from transformers import AutoImageProcessor, AutoModel

import qkviz
from qkviz.extraction.adapters import model_adapter


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_head_updates_match_the_models_output_projection_inputs(family, tiny_run, tiny_model):
    run = tiny_run(family, max_sentences=8, head_update=True)
    model = AutoModel.from_pretrained(tiny_model(family), attn_implementation="eager", dtype=torch.float32).eval()
    adapter = model_adapter(model)
    shape = adapter.shape(model.config)
    layer = 1
    seen = {}
    def keep_heads(module, args, output):
        seen["heads"] = args[0]

    def keep_hidden(module, args, kwargs):
        seen["hidden"] = args[0] if args else kwargs["hidden_states"]

    adapter.output_projections(model)[layer].register_forward_hook(keep_heads)
    adapter.layer_modules(model)[layer].register_forward_pre_hook(keep_hidden, with_kwargs=True)
    rows = run.sentence_tokens(2)
    with torch.no_grad():
        model(input_ids=torch.tensor([run.tokens.token_id.to_numpy()[rows].tolist()]))
    heads = seen["heads"][0].reshape(rows.stop - rows.start, shape.n_heads, shape.head_dim)
    hidden = seen["hidden"][0]
    slices = adapter.output_head_slices(model, shape)[layer]
    for head in range(run.n_heads):
        update = heads[:, head] @ slices[head]
        ratio = (update.norm(dim=-1) / hidden.norm(dim=-1)).numpy()
        cosine = torch.nn.functional.cosine_similarity(update, hidden, dim=-1).numpy()
        stored = run.head_updates(layer, head)[rows]
        np.testing.assert_allclose(stored[:, 0], ratio, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(stored[:, 1], cosine, atol=1e-4)


def test_runs_without_the_option_have_no_head_updates(tiny_model, tiny_corpus, tmp_path):
    run = qkviz.extract(str(tiny_model("bert")), tiny_corpus, tmp_path / "run", max_sentences=4)
    assert run.head_updates(0, 0) is None


def test_stats_summarise_head_updates_and_say_when_a_run_has_none(tiny_run, tiny_model, tiny_corpus, tmp_path, caplog):
    from qkviz.cli import main
    from qkviz.analysis.atlas.head_atlas import load_atlas

    run = tiny_run("gpt2", max_sentences=8, head_update=True)
    assert main(["-q", "stats", "--run", str(run.path)]) == 0
    atlas = load_atlas(run)
    updates = run.head_updates(1, 3)
    row = atlas.table[(atlas.table.layer == 1) & (atlas.table["head"] == 3)].iloc[0]
    assert row.update_ratio_median == pytest.approx(np.median(updates[:, 0]), rel=1e-6)
    assert row.update_cosine_mean == pytest.approx(updates[:, 1].mean(), rel=1e-5)
    assert atlas.update_histograms.shape[:3] == (run.n_layers, run.n_heads, 2)
    np.testing.assert_allclose(atlas.update_histograms.sum(axis=3), 1.0)

    plain = qkviz.extract(str(tiny_model("gpt2")), tiny_corpus, tmp_path / "plain", max_sentences=4)
    assert main(["stats", "--run", str(plain.path)]) == 0
    assert "extract with --head-update" in caplog.text
    assert load_atlas(plain).update_histograms is None


@pytest.mark.parametrize("family", ["vit", "clip-vision"])
def test_image_head_updates_match_the_models_output_projection_inputs(family, tiny_vision, tmp_path):
    images = qkviz.sample_images(crops=0)
    model_dir = tiny_vision(family)
    run = qkviz.extract(str(model_dir), images, tmp_path / "run", head_update=True, progress=False)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float32).eval()
    adapter = model_adapter(model)
    shape = adapter.shape(model.config)
    layer, seen = 1, {}
    adapter.output_projections(model)[layer].register_forward_hook(lambda m, args, out: seen.__setitem__("heads", args[0]))
    adapter.layer_modules(model)[layer].register_forward_pre_hook(
        lambda m, args, kwargs: seen.__setitem__("hidden", args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
    image = 3
    processor = AutoImageProcessor.from_pretrained(model_dir)
    pixels = processor(images=[images.image(int(run.sentences.corpus_index.iat[image]))], return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        model(pixel_values=pixels)
    rows = run.sentence_tokens(image)
    heads = seen["heads"][0].reshape(rows.stop - rows.start, shape.n_heads, shape.head_dim)
    hidden = seen["hidden"][0]
    slices = adapter.output_head_slices(model, shape)[layer]
    for head in range(run.n_heads):
        update = heads[:, head] @ slices[head]
        stored = run.head_updates(layer, head)[rows]
        np.testing.assert_allclose(stored[:, 0], (update.norm(dim=-1) / hidden.norm(dim=-1)).numpy(), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(stored[:, 1], torch.nn.functional.cosine_similarity(update, hidden, dim=-1).numpy(),
                                   atol=1e-4)


@pytest.mark.parametrize("model_type, layer, projection", [
    ("phi3", 1, "layers.1.self_attn.o_proj"),            # fused QKV projection
    ("qwen3_next", 0, "layers.1.self_attn.o_proj"),      # its one attention layer, model layer 1; gated output
    ("gptj", 1, "h.1.attn.out_proj"),                    # attention in its own method
    ("deepseek_v3", 1, "layers.1.self_attn.o_proj"),     # values smaller than queries and keys
    ("falcon", 1, "h.1.self_attention.dense"),           # attention computed by its own code
    ("xlm", 1, "attentions.1.out_lin"),                  # attention modules in a list of their own, own code
])
def test_head_updates_of_families_found_from_their_structure(model_type, layer, projection, tmp_path):
    """The output projection named here by hand (not the one discovery found) receives every head's output; each
    head's slice of it gives the update the run stored."""
    from support import CORPUS
    from support.family_configs import tiny_family_model
    from support.tiny_models import decoder_tokenizer

    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    model = tiny_family_model(model_type)
    run = qkviz.extract(model, lines[:4], tmp_path / "run", tokenizer=decoder_tokenizer(lines), head_update=True,
                        progress=False)
    output = model.get_submodule(projection)
    seen = {}
    output.register_forward_pre_hook(lambda module, args: seen.__setitem__("heads", args[0]))
    model.get_submodule(projection.split(".")[0] + "." + projection.split(".")[1]).register_forward_pre_hook(
        lambda module, args, kwargs: seen.__setitem__("hidden", args[0] if args else kwargs["hidden_states"]),
        with_kwargs=True)
    rows = run.sentence_tokens(2)
    with torch.no_grad():
        model(input_ids=torch.tensor([run.tokens.token_id.to_numpy()[rows].tolist()]))
    heads = seen["heads"][0].reshape(rows.stop - rows.start, run.n_heads, -1)
    hidden = seen["hidden"][0]
    slices = output.weight.detach().T.reshape(run.n_heads, heads.shape[-1], -1)
    for head in range(run.n_heads):
        update = heads[:, head] @ slices[head]
        stored = run.head_updates(layer, head)[rows]
        np.testing.assert_allclose(stored[:, 0], (update.norm(dim=-1) / hidden.norm(dim=-1)).numpy(), rtol=1e-4,
                                   atol=1e-6)
        np.testing.assert_allclose(stored[:, 1], torch.nn.functional.cosine_similarity(update, hidden, dim=-1).numpy(),
                                   atol=1e-4)


def test_a_shared_layers_head_updates_follow_its_calls(tmp_path):
    """ALBERT runs one layer once per layer: the run's layer i is its i-th call, and its head updates are the ones of
    that call (each call's input and output differ, so a mix-up of calls shows)."""
    from support import CORPUS
    from support.family_configs import tiny_family_model
    from support.tiny_models import decoder_tokenizer

    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    model = tiny_family_model("albert", num_hidden_layers=3)
    run = qkviz.extract(model, lines[:4], tmp_path / "run", tokenizer=decoder_tokenizer(lines), head_update=True,
                        progress=False)
    assert run.n_layers == 3 and run.manifest["shape"]["model_layers"] == [0, 0, 0]
    layer_module = model.get_submodule("encoder.albert_layer_groups.0.albert_layers.0")
    calls = {"heads": [], "hidden": []}
    layer_module.attention.dense.register_forward_pre_hook(lambda module, args: calls["heads"].append(args[0]))
    layer_module.register_forward_pre_hook(
        lambda module, args, kwargs: calls["hidden"].append(args[0] if args else kwargs["hidden_states"]),
        with_kwargs=True)
    rows = run.sentence_tokens(2)
    with torch.no_grad():
        model(input_ids=torch.tensor([run.tokens.token_id.to_numpy()[rows].tolist()]))
    slices = layer_module.attention.dense.weight.detach().T.reshape(run.n_heads, run.head_dim, -1)
    for layer in range(run.n_layers):
        heads = calls["heads"][layer][0].reshape(rows.stop - rows.start, run.n_heads, -1)
        hidden = calls["hidden"][layer][0]
        for head in range(run.n_heads):
            update = heads[:, head] @ slices[head]
            stored = run.head_updates(layer, head)[rows]
            np.testing.assert_allclose(stored[:, 0], (update.norm(dim=-1) / hidden.norm(dim=-1)).numpy(), rtol=1e-4,
                                       atol=1e-6)


def test_head_update_without_an_output_projection_found_is_one_line(tmp_path):
    """A family whose output projection discovery does not find refuses the option in one line, before anything is
    written."""
    from support import CORPUS
    from support.family_configs import tiny_family_model
    from support.tiny_models import decoder_tokenizer

    from qkviz.extraction.adapters import discovery

    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    names = tuple(name for name in discovery.OUTPUT_PROJECTION_NAMES if name != "o_proj")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(discovery, "OUTPUT_PROJECTION_NAMES", names)    # as if llama named it in a way not known
        with pytest.raises(qkviz.QkvizError, match="^head_update=True needs the attention's output projection"):
            qkviz.extract(tiny_family_model("llama"), lines[:4], tmp_path / "run", tokenizer=decoder_tokenizer(lines),
                          head_update=True, progress=False)
    assert not (tmp_path / "run").exists()


def test_a_run_without_head_updates_is_named_in_the_callers_words(tiny_model, tiny_corpus, tmp_path, caplog):
    """Issue 49: the README's Python snippet (qkviz.compute_stats on a run extracted without head updates) was told
    to give the command line's --head-update; Python is told head_update=True, the command line still --head-update."""
    import logging

    from support.cli import run_main

    run = qkviz.extract(str(tiny_model("gpt2")), tiny_corpus, tmp_path / "plain", max_sentences=4, progress=False)
    with caplog.at_level(logging.WARNING, logger="qkviz"):
        qkviz.compute_stats(run, probes=False, progress=False)
    assert "extract with head_update=True to add them" in caplog.text and "--head-update" not in caplog.text
    done = run_main("-q", "stats", "--run", str(run.path), "--no-probes")
    assert done.returncode == 0, done.stderr
    assert "extract with --head-update to add them" in done.stderr and "head_update=True" not in done.stderr
    from qkviz.core import command_line_caller, option

    assert [option("head_update"), option("out", None), option("dtype", "float32"), option("client", None, flag="--dask")] \
        == ["head_update=True", "out", "dtype='float32'", "client"]
    with command_line_caller():
        assert [option("head_update"), option("out", None), option("dtype", "float32"),
                option("client", None, flag="--dask")] == ["--head-update", "--out", "--dtype float32", "--dask"]
    assert option("overwrite") == "overwrite=True"          # the command over, Python's words again
