"""Extraction from a model and tokenizer in memory: exact like extraction from a directory, the model given
back as it was, and bad objects refused in one line."""

import copy

import numpy as np
import pytest
import torch
import transformers
from support import CORPUS
from support.attention_check import max_attention_error
from support.tiny_models import FAMILIES
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

import qkviz
from qkviz.extraction.streaming.text_capture import pad_token_id
from qkviz.extraction.models.loading import model_directory

TOLERANCE = 1e-5


def sentences_of(path, count: int) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[:count]


def forward(model, tokenizer) -> torch.Tensor:
    batch = tokenizer(["The cat sat on the mat.", "It rained."], return_tensors="pt", padding=True)
    with torch.no_grad():
        return model(**batch).last_hidden_state


@pytest.mark.parametrize("family", FAMILIES)
def test_in_memory_model_is_exact_and_matches_its_directory(family, tiny_model, tiny_corpus, tmp_path):
    model_dir = tiny_model(family)
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    run = qkviz.extract(model, sentences_of(tiny_corpus, 40), tmp_path / "memory", tokenizer=tokenizer,
                        max_sentences=24, seed=3, batch_size=8, progress=False)
    error, departure = max_attention_error(run, model_dir, list(range(run.n_sentences)), pad_token_id(tokenizer))
    assert error <= TOLERANCE, f"{family}: max abs error {error:.2e}"
    assert departure > 0.2, "attention is near uniform: the comparison would not catch an error"

    from_directory = qkviz.extract(str(model_dir), tiny_corpus, tmp_path / "directory", max_sentences=24, seed=3,
                                   batch_size=8, progress=False)
    assert run.manifest["fingerprint"] == from_directory.manifest["fingerprint"]
    assert run.manifest["corpus"]["sha256"] == from_directory.manifest["corpus"]["sha256"]
    for layer in range(run.n_layers):
        np.testing.assert_array_equal(run.queries(layer, 0), from_directory.queries(layer, 0))
        np.testing.assert_array_equal(run.keys(layer, run.n_heads - 1), from_directory.keys(layer, run.n_heads - 1))
    assert run.tokens.equals(from_directory.tokens)
    model_record = run.manifest["model"]
    assert model_record["in_memory"] is True and model_record["class"] == type(model).__name__
    assert model_record["name_or_path"] == str(model_dir)
    assert model_record["weights_sha256"] == from_directory.manifest["model"]["weights_sha256"]


def test_the_model_is_given_back_as_it_was(tiny_model, tmp_path):
    """Training mode, attention implementation, parameters and outputs are the same after the extraction."""
    model_dir = tiny_model("bert")
    model = AutoModel.from_pretrained(model_dir, attn_implementation="eager")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model.train()
    model.encoder.layer[0].eval()            # a mixed state is restored module by module
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.eval()
    outputs = forward(model, tokenizer)
    model.train()
    model.encoder.layer[0].eval()
    flags = {name: module.training for name, module in model.named_modules()}

    qkviz.extract(model, ["The cat sat.", "A dog ran far away."], tmp_path / "run", tokenizer=tokenizer,
                  device="cpu", progress=False)

    assert {name: module.training for name, module in model.named_modules()} == flags
    assert model.config._attn_implementation == "eager"
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    model.eval()
    torch.testing.assert_close(forward(model, tokenizer), outputs, rtol=0, atol=0)


def test_a_model_with_a_head_extracts_its_base_model(tiny_model, tiny_corpus, tmp_path):
    """A causal LM object (with its language-model head) gives the run of its base model's directory."""
    model_dir = tiny_model("llama")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    run = qkviz.extract(model, sentences_of(tiny_corpus, 40), tmp_path / "lm", max_sentences=6,
                        progress=False)   # its tokenizer is found in its directory
    from_directory = qkviz.extract(str(model_dir), tiny_corpus, tmp_path / "dir", max_sentences=6, progress=False)
    assert run.manifest["fingerprint"] == from_directory.manifest["fingerprint"]
    assert run.manifest["model"]["class"] == "LlamaForCausalLM"
    np.testing.assert_array_equal(run.queries(1, 2), from_directory.queries(1, 2))


@pytest.mark.slow
def test_bundled_minilm_in_memory_is_exact(tmp_path):
    directory = model_directory("minilm")[0]
    model = AutoModel.from_pretrained(directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    run = qkviz.extract(model, sentences_of(CORPUS, 10_000), tmp_path / "minilm", tokenizer=tokenizer,
                        max_sentences=24, progress=False)
    error, departure = max_attention_error(run, directory, list(range(run.n_sentences)), pad_token_id(tokenizer))
    assert error <= TOLERANCE, f"MiniLM: max abs error {error:.2e}"
    assert departure > 0.2
    from_name = qkviz.extract("minilm", CORPUS, tmp_path / "by-name", max_sentences=24, progress=False)
    assert run.manifest["fingerprint"] == from_name.manifest["fingerprint"]
    np.testing.assert_array_equal(run.keys(5, 11), from_name.keys(5, 11))


def refused_model():
    config = transformers.MPNetConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32)
    return AutoModel.from_config(config)


def test_bad_models_and_tokenizers_are_one_line_errors(tiny_model, tmp_path):
    bert_dir = tiny_model("bert")
    bert = AutoModel.from_pretrained(bert_dir)
    tokenizer = AutoTokenizer.from_pretrained(bert_dir)
    minilm_tokenizer = AutoTokenizer.from_pretrained(model_directory("minilm")[0])
    sentences = ["The cat sat."]
    config = copy.deepcopy(bert.config)
    config.name_or_path = ""                 # a model made from a configuration: no directory to find a tokenizer in
    nameless = AutoModel.from_config(config)
    cases = [
        (dict(model=torch.nn.Linear(2, 2), tokenizer=tokenizer), "not a transformers model"),
        (dict(model=refused_model(), tokenizer=tokenizer), "model object MPNetModel: mpnet model not supported: MPNet adds"),
        (dict(model=bert, tokenizer=minilm_tokenizer), "tokenizer does not match the model: it gives token id"),
        (dict(model=bert, tokenizer=transformers.ByT5Tokenizer()), "slow tokenizer"),
        (dict(model=bert, tokenizer="bert-base-uncased"), "not a transformers tokenizer"),
        (dict(model=nameless), "give the model's tokenizer"),
        (dict(model=str(bert_dir), tokenizer=tokenizer), "tokenizer= goes with a model object"),
    ]
    for number, (arguments, message) in enumerate(cases):
        with pytest.raises(qkviz.QkvizError) as caught:
            qkviz.extract(corpus=sentences, out=tmp_path / f"run{number}", progress=False, **arguments)
        assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
        assert not (tmp_path / f"run{number}").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_model_moved_for_the_extraction_goes_back(tiny_model, tmp_path):
    model_dir = tiny_model("llama")
    model = AutoModel.from_pretrained(model_dir)
    run = qkviz.extract(model, ["The cat sat.", "A dog ran far away."], tmp_path / "run", device="cuda",
                        progress=False)
    assert next(model.parameters()).device.type == "cpu"
    assert run.manifest["extraction"]["device"].startswith("cuda")
    on_cpu = qkviz.extract(model, ["The cat sat.", "A dog ran far away."], tmp_path / "cpu", progress=False)
    np.testing.assert_allclose(run.queries(1, 0), on_cpu.queries(1, 0), atol=1e-4)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_asking_for_cuda_without_one_is_a_one_line_error(tiny_model, tmp_path):
    model = AutoModel.from_pretrained(tiny_model("bert"))
    with pytest.raises(qkviz.QkvizError, match="^device cuda was asked for but no CUDA device is available; use "
                                               "device='cpu'$"):
        qkviz.extract(model, ["The cat sat."], tmp_path / "run", device="cuda", progress=False)
    assert next(model.parameters()).device.type == "cpu"
