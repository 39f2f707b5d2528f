"""Head statistics and labels on synthetic heads whose answers are known, written into real runs."""

import logging
import shutil

import numpy as np
import pytest

from qkviz.analysis.statistics.attention_batches import head_attention, sentence_batches
from qkviz.cli import main
from qkviz.analysis.atlas.head_atlas import ATLAS_SCHEMA_VERSION, load_atlas
from qkviz.analysis.labels.head_labels import LabelThresholds, head_label
from qkviz.analysis.statistics.head_stats import head_statistics
from qkviz.analysis.statistics.token_kinds import is_punctuation
from qkviz.store.run import open_stored_run
from support.cli import run_main
from support.runs import reseal


def with_head(run, tmp_path, queries, keys, layer=0, head=0):
    """A copy of ``run`` whose (layer, head) holds the given ``[token, d_head]`` vectors."""
    copy = tmp_path / "synthetic"
    shutil.copytree(run.path, copy)
    stored_queries = np.load(copy / "queries.npy", mmap_mode="r+")
    stored_keys = np.load(copy / "keys.npy", mmap_mode="r+")
    stored_queries[layer, head] = queries
    stored_keys[layer, run.kv_head(head)] = keys
    stored_queries.flush()
    stored_keys.flush()
    reseal(copy)
    return open_stored_run(copy)


def rotated(positions, angle, length, head_dim):
    vectors = np.zeros((len(positions), head_dim), dtype=np.float32)
    vectors[:, 0] = length * np.cos(angle * positions)
    vectors[:, 1] = length * np.sin(angle * positions)
    return vectors


def previous_token_head(run, tmp_path):
    """A copy of ``run`` whose layer 0 head 0 attends to the previous token: ``q_p`` points where
    ``k_(p-1)`` points, 10^8 times longer, so the previous key wins by far (adjacent directions differ by less
    than a degree in sentences of ~200 tokens)."""
    position = run.tokens.position.to_numpy()
    angle = np.pi / (2 * position.max() + 2)
    return with_head(run, tmp_path, rotated(position - 1, angle, 1e8, run.head_dim),
                     rotated(position, angle, 1.0, run.head_dim))


def test_a_previous_token_head(tiny_run, tmp_path):
    run = tiny_run("gpt2", max_sentences=30)
    position = run.tokens.position.to_numpy()
    synthetic = previous_token_head(run, tmp_path)
    found = head_statistics(synthetic, 0, 0)
    later = (position > 0).sum() / len(position)     # position 0 can only attend to itself
    assert found.values["argmax_previous"] == pytest.approx(later)
    assert found.values["mean_distance"] == pytest.approx(later, abs=1e-6)
    assert found.values["entropy"] == pytest.approx(0, abs=1e-6)
    assert found.values["variability"] == pytest.approx(0, abs=1e-6)   # position alone decides it
    assert found.relative_position[found.relative_position.size // 2 - 1] == pytest.approx(1, abs=1e-6)
    assert head_label(found.values) == ("previous-token", f"{later:.1%} of queries")


def test_equal_logits_are_uniform_maximal_entropy_and_broad(tiny_run, tmp_path):
    run = tiny_run("bert", max_sentences=30)
    zeros = np.zeros((run.n_tokens, run.head_dim), dtype=np.float32)
    synthetic = with_head(run, tmp_path, zeros, np.ones_like(zeros))
    found = head_statistics(synthetic, 0, 0)
    lengths = run.sentences.n_tokens.to_numpy()
    assert found.values["entropy_normalised"] == pytest.approx(1.0, abs=1e-9)
    assert found.values["entropy"] == pytest.approx((lengths * np.log(lengths)).sum() / lengths.sum(), abs=1e-9)
    for share in ("argmax_self", "argmax_first", "argmax_previous", "argmax_next", "argmax_delimiter"):
        assert found.values[share] == 0        # ties: no query has a strongest key
    assert found.values["concentration"] == pytest.approx(0, abs=1e-12)
    assert head_label(found.values)[0] == "broad"


def sink_head(run, tmp_path):
    """``run`` copied with L0H0 a sink: every query's attention on its sequence's first token."""
    position = run.tokens.position.to_numpy()
    keys = np.zeros((run.n_tokens, run.head_dim), dtype=np.float32)
    keys[position == 0, 0] = 1000.0
    queries = np.zeros_like(keys)
    queries[:, 0] = 1.0
    return with_head(run, tmp_path, queries, keys)


def test_a_sink_head_attends_to_the_first_token(tiny_run, tmp_path):
    run = tiny_run("llama", max_sentences=30)
    position = run.tokens.position.to_numpy()
    found = head_statistics(sink_head(run, tmp_path), 0, 0)
    assert found.values["argmax_first"] == 1.0
    assert found.values["first_token_attention"] == pytest.approx(1, abs=1e-9)
    assert found.values["mean_distance"] == pytest.approx(position.mean(), abs=1e-6)
    assert found.values["mean_distance_no_first"] < found.values["mean_distance"]
    assert head_label(found.values)[0] == "first-token"


@pytest.mark.parametrize("family", ["mistral", "bert"])
def test_batched_attention_equals_the_per_sentence_reference(tiny_run, family):
    run = tiny_run(family, max_sentences=30)
    for batch, probs in head_attention(run, 1, 1, sentence_batches(run, max_cells=2000)):
        for row, sentence in enumerate(batch.sentences):
            n = batch.lengths[row]
            np.testing.assert_allclose(probs[row, :n, :n], run.attention(1, 1, int(sentence)), atol=1e-12)
            assert probs[row, n:].sum() == 0 and probs[row, :, n:].sum() == 0


def test_labels_follow_the_thresholds():
    values = dict(argmax_previous=0.4, argmax_next=0.0, argmax_self=0.1, argmax_offset=0.0, offset=-2.0,
                  argmax_first=0.3, argmax_delimiter=0.1, entropy_normalised=0.5)
    assert head_label(values)[0] == "content"
    assert head_label(values, LabelThresholds(argmax_share=0.4))[0] == "previous-token"
    assert head_label({**values, "argmax_offset": 0.7})[1].startswith("offset -2")
    assert head_label({**values, "entropy_normalised": 0.9})[0] == "broad"
    assert is_punctuation(",") and is_punctuation("Ġ.") and not is_punctuation("the") and not is_punctuation("")


def test_stats_command_stores_the_atlas_and_refuses_bad_thresholds(tiny_run, tmp_path, capsys, caplog):
    run = tiny_run("gpt2", max_sentences=30)
    copy = tmp_path / "run"
    shutil.copytree(run.path, copy)
    run = open_stored_run(copy)
    assert load_atlas(run) is None
    assert main(["-q", "stats", "--run", str(copy), "--max-offset", "8"]) == 0
    atlas = load_atlas(run)
    assert len(atlas.table) == run.n_layers * run.n_heads
    assert atlas.relative_position.shape == (run.n_layers, run.n_heads, 17)
    assert not np.isnan(atlas.relative_position[:, :, :9]).any()     # offsets -8..0 exist in a decoder
    assert np.isnan(atlas.relative_position[:, :, 9:]).all()          # a decoder never looks ahead
    assert set(atlas.exemplars.columns) >= {"layer", "head", "sentence", "query_token", "key_token", "text"}
    # GPT-2 has absolute positions: its first layer's logits are split into token and position parts.
    embed = atlas.table.filter(like="embed_share_")
    assert embed.shape[1] == 5 and embed[atlas.table.layer == 0].notna().all().all()
    assert embed[atlas.table.layer > 0].isna().all().all()
    assert atlas.embedding_profiles.shape == (run.n_heads, 5, 17)
    assert atlas.offset_support.shape == (run.n_layers, run.n_heads, 3, 17)
    marker = copy / "stats" / "atlas.json"
    marker.write_text(marker.read_text().replace(f'"schema_version": {ATLAS_SCHEMA_VERSION}', '"schema_version": 3'))
    with caplog.at_level(logging.WARNING):
        assert load_atlas(run) is None        # an atlas of an older layout (3: no offset support) is not read as this one
    refusal = [record.getMessage() for record in caplog.records if "another qkviz version" in record.getMessage()]
    assert len(refusal) == 1 and "\n" not in refusal[0] and f"qkviz stats --run {copy}' again" in refusal[0]
    result = run_main("-q", "stats", "--run", copy, "--argmax-share", "1.5")
    assert result.returncode == 2 and "argument --argmax-share: 1.5 is out of range" in result.stderr


def test_syntax_statistics_of_a_previous_token_head_match_a_direct_count(tiny_run, tmp_path):
    from qkviz.analysis.statistics.syntax import POS_TAGS, TokenSyntax, batch_syntax, load_pipeline

    synthetic = previous_token_head(tiny_run("gpt2", max_sentences=30), tmp_path)
    nlp = load_pipeline()
    parsed = TokenSyntax.parse(synthetic, nlp)
    batches = sentence_batches(synthetic)
    found = head_statistics(synthetic, 0, 0, batches=batches,
                            syntax=[batch_syntax(parsed, batch) for batch in batches]).values
    # Direct count: a query attends (fully) to the previous token; is that pair a dependency?
    tokens = synthetic.tokens
    related = 0
    for sentence, text in enumerate(synthetic.sentences.text):
        document = nlp(text)
        rows = synthetic.sentence_tokens(sentence)
        words = []
        for start, end in zip(tokens.char_start[rows], tokens.char_end[rows]):
            hits = [t for t in document if t.idx < end and t.idx + len(t) > start] if start >= 0 else []
            words.append(hits[0] if hits else None)
        for here, before in zip(words[1:], words[:-1]):
            if here is not None and before is not None and here.i != before.i:
                related += here.head.i == before.i or before.head.i == here.i
    assert found["dependency_alignment"] == pytest.approx(related / synthetic.n_tokens, abs=1e-6)
    assert sum(found[f"pos_{tag}"] for tag in POS_TAGS) == pytest.approx(1.0, abs=1e-9)


def test_syntax_without_the_extra_is_a_one_line_error(tiny_run, capsys, monkeypatch):
    from qkviz.analysis.statistics import syntax as syntax_module

    monkeypatch.setattr(syntax_module, "SPACY_PIPELINE", "qkviz_no_such_pipeline")
    run_path = str(tiny_run("bert", max_sentences=30).path)
    capsys.readouterr()   # what making the run printed
    assert main(["-q", "stats", "--run", run_path, "--syntax"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "pip install 'qkviz[syntax]'" in error


def test_what_the_first_and_special_tokens_transmit(tiny_run, tmp_path):
    """Uniform attention (zero queries and keys) in an encoder: every query gives each of a sentence's ``n`` keys
    ``1/n``. With output norms ``a`` on [CLS] (the first token), ``b`` on [SEP] and 1 elsewhere, a query receives
    ``a / (a + b + n - 2)`` of what it moves from [CLS] and ``(a + b) / (a + b + n - 2)`` from the special tokens."""
    from qkviz.analysis.statistics.value_shares import VALUE_STATISTICS
    from qkviz.store import files as run_files

    run = tiny_run("bert")
    assert run.has_output_norms
    zeros = np.zeros((run.n_tokens, run.head_dim), dtype=np.float32)
    synthetic = with_head(run, tmp_path, zeros, zeros)
    special = synthetic.tokens.is_special.to_numpy()
    position = synthetic.tokens.position.to_numpy()
    a, b = 0.05, 3.0
    norms = np.where(position == 0, a, np.where(special, b, 1.0)).astype(np.float32)
    stored = np.load(synthetic.path / run_files.OUTPUT_NORMS, mmap_mode="r+")
    stored[0, 0] = norms
    stored.flush()
    reseal(synthetic.path)
    found = head_statistics(open_stored_run(synthetic.path), 0, 0).values
    lengths = synthetic.sentences.n_tokens.to_numpy().astype(float)
    per_sentence = [special[synthetic.sentence_tokens(s)] for s in range(synthetic.n_sentences)]
    assert all(kinds[0] and kinds[-1] and kinds.sum() == 2 for kinds in per_sentence)    # [CLS] ... [SEP]
    first_share = (lengths * a / (a + b + lengths - 2)).sum() / lengths.sum()
    special_share = (lengths * (a + b) / (a + b + lengths - 2)).sum() / lengths.sum()
    first_attention = synthetic.n_sentences / lengths.sum()           # every query gives the first token 1/n
    special_attention = 2 * synthetic.n_sentences / lengths.sum()
    assert found["first_token_attention"] == pytest.approx(first_attention)
    assert found["first_token_value_share"] == pytest.approx(first_share)
    assert found["special_value_share"] == pytest.approx(special_share)
    assert found["first_token_transmits"] == pytest.approx(first_share / first_attention)
    assert found["special_transmits"] == pytest.approx(special_share / special_attention)
    assert found["first_token_transmits"] < 0.2 < 1 < found["special_transmits"]    # a sink that moves little
    assert set(VALUE_STATISTICS) <= set(found)


def test_no_value_statistics_without_output_norms(tiny_run, tmp_path):
    import json

    from qkviz.analysis.statistics.value_shares import VALUE_STATISTICS
    from qkviz.store import files as run_files

    copy = tmp_path / "old"
    shutil.copytree(tiny_run("bert").path, copy)
    (copy / run_files.OUTPUT_NORMS).unlink()
    manifest = json.loads((copy / run_files.MANIFEST).read_text())
    for key in ("files", "sha256"):
        manifest[key].pop(run_files.OUTPUT_NORMS)
    (copy / run_files.MANIFEST).write_text(json.dumps(manifest))
    found = head_statistics(open_stored_run(copy), 0, 0).values
    assert not set(VALUE_STATISTICS) & set(found) and "first_token_attention" in found
