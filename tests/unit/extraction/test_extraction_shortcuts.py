"""The shortcuts that make extraction cheap around its forward pass give exactly what the plain way gives: the weights'
hash of the bytes of every tensor, the capture's own operators on one thread (the model's on all of them), the gate's
heads recomputed at once as each alone, the scatter's placement of a batch as a boolean mask and an assignment place
it, the token table as one row built at a time, and every checksum the manifest records that of its file as
written."""

import hashlib

import numpy as np
import pandas as pd
import pytest
import torch
from support.family_configs import tiny_family_model
from support.tiny_models import FAMILIES

from qkviz.core import LogitRule
from qkviz.extraction.adapters import model_adapter
from qkviz.extraction.capture.recorder import AttentionRecorder, capturing
from qkviz.extraction.streaming.chunk_capture import ChunkBuffers, Scatter, attention_layers
from qkviz.extraction.gate.exactness_gate import recomputed_probabilities
from qkviz.extraction.writing.run_manifest import model_identity
from qkviz.extraction.inputs.selection import TokenizedSentence
from qkviz.extraction.writing.token_table import token_table
from qkviz.store import files as run_files


def test_the_weights_hash_is_that_of_every_tensors_bytes_as_runs_made_before_recorded_it():
    model = tiny_family_model("llama")
    with torch.no_grad():
        model.get_input_embeddings().weight[:2].mul_(-1.5)       # the hash follows the weights
    model.register_buffer("scalar", torch.tensor(0.25))          # 0-dim: hashed flattened
    reference = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        reference.update(name.encode())
        reference.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                         if tensor.numel() else b"")
    identity = model_identity(type("Loaded", (), {"model": model})(), "tiny")
    assert identity["weights_sha256"] == reference.hexdigest()


def test_the_capture_computes_on_one_thread_the_same_numbers_and_gives_the_model_its_threads_back():
    model = tiny_family_model("llama").eval()
    adapter = model_adapter(model)
    layers = attention_layers(model, adapter, adapter.shape(model.config))
    input_ids = torch.randint(0, model.config.vocab_size, (2, 12))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        captured = {}
        for one_thread in (False, True):
            seen = captured[one_thread] = []

            def sink(layer, queries, keys, value_norms):
                seen.append((torch.get_num_threads(), (queries * 1.5).clone(), keys.clone(), value_norms.clone()))

            with torch.inference_mode(), capturing(model, AttentionRecorder(layers, sink, one_thread=one_thread)):
                model(input_ids=input_ids)
            assert torch.get_num_threads() == 2, "the model's threads are given back after each layer"
        assert [entry[0] for entry in captured[False]] == [2] * layers.n_layers
        assert [entry[0] for entry in captured[True]] == [1] * layers.n_layers
        for alone, shared in zip(captured[True], captured[False]):
            for mine, theirs in zip(alone[1:], shared[1:]):
                assert torch.equal(mine, theirs)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("rule", [LogitRule(0.3), LogitRule(0.3, causal=True), LogitRule(0.2, causal=True, window=5),
                                  LogitRule(0.3, softcap=2.0, sink=0.4), LogitRule(0.3, causal=True, alibi_slope=-0.1)])
@pytest.mark.parametrize("rows", [None, np.array([0, 7, 12, 19])])
def test_heads_recomputed_at_once_are_bit_for_bit_each_head_alone(rule, rows):
    rng = np.random.default_rng(3)
    n, heads = 20, 6
    queries = rng.normal(size=(heads, n if rows is None else len(rows), 16)) * 3
    keys = rng.normal(size=(heads, n, 16)) * 3
    together = recomputed_probabilities(queries, keys, n, rows, rule)
    for head in range(heads):
        alone = recomputed_probabilities(queries[head], keys[head], n, rows, rule)
        assert np.array_equal(together[head].view(np.uint64), alone.view(np.uint64)), head


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("offset_positions", [9, 5])      # every position its own offset; the last ones sharing one
def test_the_scatter_places_a_batch_as_a_mask_and_an_assignment_do(dtype, offset_positions):
    torch.manual_seed(0)
    batch, heads, positions, d_head, chunk = 4, 3, 9, 8, 40
    shape = type("Shape", (), {"n_layers": 1, "n_heads": heads, "n_kv_heads": heads, "head_dim": d_head})()
    mask = torch.zeros(batch, positions, dtype=torch.long)
    for row, length in enumerate((9, 7, 4, 1)):
        mask[row, :length] = 1
    rows = np.random.default_rng(1).permutation(chunk)[:int(mask.sum())]
    # the model's layout: [batch, pos, head, d] seen as [batch, head, pos, d]
    queries = torch.randn(batch, positions, heads, d_head).transpose(1, 2)
    keys = torch.randn(batch, heads, positions, d_head)
    norms = keys.norm(dim=-1)
    scatter = Scatter(ChunkBuffers.allocate(shape, chunk, np.dtype(dtype), output_norms=True), None, offset_positions)
    scatter.set_batch(mask, rows)
    scatter(0, queries, keys, norms)
    scatter.output_norms(0, norms * 2)

    real = mask.bool()
    expected = np.zeros((heads, chunk, d_head), dtype=dtype)
    chosen = queries.transpose(0, 1)[:, real].float()
    offsets = scatter.offsets()[run_files.QUERY_OFFSETS][0]
    offset_rows = torch.arange(positions).expand_as(mask)[real].clamp(max=scatter.n_positions - 1)
    expected[:, rows] = (chosen - torch.from_numpy(offsets)[:, offset_rows]).to(torch.from_numpy(expected).dtype).numpy()
    # the chunk's rows (the padding went to the discard row after them)
    assert scatter.buffers.discard_row == chunk
    assert np.array_equal(scatter.buffers.queries[0, :, :chunk].view(np.uint8), expected.view(np.uint8))
    placed_norms = np.zeros((heads, chunk), dtype=np.float32)
    placed_norms[:, rows] = norms.transpose(0, 1)[:, real].numpy()
    assert np.array_equal(scatter.buffers.value_norms[0, :, :chunk], placed_norms)
    assert np.array_equal(scatter.buffers.output_norms[0, :, :chunk], placed_norms * 2)


def test_the_token_table_is_the_one_built_a_row_at_a_time():
    sentences = [TokenizedSentence(0, "A cat  sat.", (1, 5, 6, 7, 2), ((0, 0), (0, 1), (2, 5), (5, 7), (0, 0)),
                                   (True, False, False, False, True), False),
                 TokenizedSentence(3, "Hi", (1, 9, 2), ((0, 0), (0, 2), (0, 0)), (True, False, True), False)]

    class Vocabulary:
        def convert_ids_to_tokens(self, ids):
            return [f"<{i}>" for i in ids]

    rows = []
    for number, sentence in enumerate(sentences):
        for position, (token_id, (start, end), special) in enumerate(zip(sentence.token_ids, sentence.offsets,
                                                                         sentence.special)):
            piece = f"<{token_id}>"
            rows.append({"sentence": number, "position": position,
                         "token": ("" if special else sentence.text[start:end].strip()) or piece, "piece": piece,
                         "token_id": token_id, "char_start": -1 if special else start,
                         "char_end": -1 if special else end, "is_special": special,
                         "sentence_chars": len(sentence.text)})
    expected = pd.DataFrame(rows)
    for column in ("sentence", "position", "token_id", "char_start", "char_end", "sentence_chars"):
        expected[column] = expected[column].astype(np.int32)
    table = token_table(sentences, Vocabulary())
    pd.testing.assert_frame_equal(table, expected)
    assert list(table["token"]) == ["<1>", "A", "cat", "<7>", "<2>", "<1>", "Hi", "<2>"]


@pytest.mark.parametrize("options", [{}, {"dtype": "float16", "head_update": True}])
def test_every_checksum_in_the_manifest_is_that_of_its_file(tiny_run, options):
    from qkviz.store.manifest import read_manifest

    run = tiny_run(FAMILIES[-1], **options)
    directory = getattr(run, "path", run)
    manifest = read_manifest(directory)
    assert set(manifest["sha256"]) == set(manifest["files"]) and len(manifest["files"]) >= 8
    for name, digest in manifest["sha256"].items():
        assert digest == run_files.file_sha256(directory / name), name
