"""The run store: round trip, manifest last, reuse, refusal, resume, damage detection."""

import json

import numpy as np
import pytest

import qkviz
import qkviz.extraction.adapters
from qkviz.extraction.streaming import text_capture
from qkviz.extraction import extract_run
from qkviz.store import files as run_files
from qkviz.core.errors import IncompleteRunError, QkvizError
from qkviz.store.run import SENTENCE_COLUMNS, TOKEN_COLUMNS


class SimulatedCrash(BaseException):
    """Stands for a kill or power cut in the middle of an extraction: like a real one, nothing the extraction
    catches (its boundary turns a failure of the model's own code, an ``Exception``, into a refusal)."""


@pytest.fixture(scope="module")
def bert_run(tiny_model, tiny_corpus, tmp_path_factory):
    return qkviz.extract(str(tiny_model("bert")), tiny_corpus, tmp_path_factory.mktemp("runs") / "bert",
                         max_sentences=12)


def test_round_trip_shapes_tables_and_offsets(bert_run, corpus_sentences):
    run = qkviz.open_run(bert_run.path)
    assert (run.n_layers, run.n_heads, run.n_kv_heads, run.head_dim) == (2, 4, 4, 16)
    assert run.is_causal is False and run.family == "bert"
    assert tuple(run.tokens.columns) == TOKEN_COLUMNS
    assert tuple(run.sentences.columns) == SENTENCE_COLUMNS
    assert len(run.tokens) == run.n_tokens == int(run.sentences.n_tokens.sum())
    for layer in range(run.n_layers):
        q, k, v = run.queries(layer, 3), run.keys(layer, 3), run.value_norms(layer, 3)
        assert q.shape == k.shape == (run.n_tokens, run.head_dim) and q.dtype == np.float32
        assert v.shape == (run.n_tokens,) and (v > 0).all()
    for sentence in range(run.n_sentences):
        rows = run.tokens.iloc[run.sentence_tokens(sentence)]
        text = run.sentences.text[sentence]
        assert text == corpus_sentences[run.sentences.corpus_index[sentence]]
        assert rows.is_special.iloc[0] and rows.is_special.iloc[-1]           # [CLS] ... [SEP]
        assert list(rows.position) == list(range(len(rows)))
        words = rows[~rows.is_special]
        for start, end, token in zip(words.char_start, words.char_end, words.token):
            assert text[start:end].strip() == token


def test_sentences_are_a_seeded_sample_in_corpus_order(tiny_model, tiny_corpus, tmp_path):
    model = str(tiny_model("bert"))
    first = qkviz.extract(model, tiny_corpus, tmp_path / "a", max_sentences=10, seed=1)
    again = qkviz.extract(model, tiny_corpus, tmp_path / "b", max_sentences=10, seed=1)
    other = qkviz.extract(model, tiny_corpus, tmp_path / "c", max_sentences=10, seed=2)
    chosen = list(first.sentences.corpus_index)
    assert chosen == sorted(chosen) == list(again.sentences.corpus_index)
    assert chosen != list(other.sentences.corpus_index)
    capped = qkviz.extract(model, tiny_corpus, tmp_path / "d", max_tokens=150)
    assert 100 < capped.n_tokens <= 150


def test_identical_inputs_reuse_and_different_ones_are_refused(bert_run, tiny_model, tiny_corpus):
    model = str(tiny_model("bert"))
    manifest_before = (bert_run.path / run_files.MANIFEST).read_text()
    again = extract_run(model, tiny_corpus, bert_run.path, max_sentences=12, batch_size=3)
    assert again.status == "reused"
    assert (bert_run.path / run_files.MANIFEST).read_text() == manifest_before
    with pytest.raises(QkvizError, match=r"different settings; pass overwrite=True"):
        qkviz.extract(model, tiny_corpus, bert_run.path, max_sentences=12, dtype="float16")


def test_overwrite_replaces_a_run(tiny_model, tiny_corpus, tmp_path):
    model = str(tiny_model("bert"))
    qkviz.extract(model, tiny_corpus, tmp_path / "run", max_sentences=5)
    replaced = extract_run(model, tiny_corpus, tmp_path / "run", max_sentences=7, overwrite=True)
    assert replaced.status == "extracted" and replaced.run.n_sentences == 7


def test_an_extraction_gives_each_steps_seconds_in_order(tiny_model, tiny_corpus, tmp_path):
    from qkviz.extraction.writing.pipeline import STEPS

    model = str(tiny_model("bert"))
    fresh = extract_run(model, tiny_corpus, tmp_path / "run", max_sentences=5)
    assert list(fresh.steps) == list(STEPS)                              # every step timed, in the order they run
    assert all(spent >= 0 for spent in fresh.steps.values()) and sum(fresh.steps.values()) <= fresh.seconds
    reused = extract_run(model, tiny_corpus, tmp_path / "run", max_sentences=5)
    assert reused.status == "reused" and list(reused.steps) == ["corpus", "model", "select", "hash"]


def test_a_directory_that_is_not_a_run_is_never_written(tiny_model, tiny_corpus, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(QkvizError, match="not a qkviz run"):
        qkviz.extract(str(tiny_model("bert")), tiny_corpus, tmp_path, max_sentences=3, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_interrupted_run_is_incomplete_then_resumes_to_identical_arrays(tiny_model, tiny_corpus, tmp_path,
                                                                        monkeypatch):
    model = str(tiny_model("llama"))
    reference = qkviz.extract(model, tiny_corpus, tmp_path / "reference", max_sentences=30)
    # Chunks of about 60 tokens, and a crash while the third chunk runs.
    monkeypatch.setattr(text_capture, "CHUNK_BYTES", 60 * text_capture.bytes_per_token(
        qkviz.extraction.adapters.ModelShape(2, 4, 2, 16), np.dtype("float32")))
    real_chunk = text_capture._capture_chunk
    calls = []
    crash_armed = [True]

    def crash_on_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3 and crash_armed[0]:
            crash_armed[0] = False
            raise SimulatedCrash
        return real_chunk(*args, **kwargs)

    monkeypatch.setattr(text_capture, "_capture_chunk", crash_on_third)
    with pytest.raises(SimulatedCrash):
        qkviz.extract(model, tiny_corpus, tmp_path / "run", max_sentences=30)
    assert not (tmp_path / "run" / run_files.MANIFEST).exists()
    progress = json.loads((tmp_path / "run" / run_files.PROGRESS).read_text())
    assert 0 < progress["tokens_done"] < reference.n_tokens
    with pytest.raises(IncompleteRunError, match="interrupted"):
        qkviz.open_run(tmp_path / "run")

    chunks = len(text_capture.chunk_sentences(
        [range(n) for n in reference.sentences.n_tokens], text_capture.CHUNK_BYTES // text_capture.bytes_per_token(
            qkviz.extraction.adapters.ModelShape(2, 4, 2, 16), np.dtype("float32"))))
    calls.clear()
    resumed = extract_run(model, tiny_corpus, tmp_path / "run", max_sentences=30)
    assert resumed.status == "resumed"
    assert len(calls) == chunks - 2  # the two chunks finished before the crash were not run again
    assert not (tmp_path / "run" / run_files.PROGRESS).exists()
    # Equal up to float noise: chunking changed which sentences share a padded batch.
    for layer in range(reference.n_layers):
        for head in range(reference.n_heads):
            np.testing.assert_allclose(resumed.run.queries(layer, head), reference.queries(layer, head), atol=1e-5)
            np.testing.assert_allclose(resumed.run.keys(layer, head), reference.keys(layer, head), atol=1e-5)


def test_damaged_runs_are_refused_when_opened(bert_run, tmp_path):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(bert_run.path, damaged)
    with open(damaged / run_files.QUERIES, "r+b") as handle:
        handle.truncate(1000)
    with pytest.raises(IncompleteRunError, match="queries.npy has 1000 bytes"):
        qkviz.open_run(damaged)
    (damaged / run_files.MANIFEST).write_text("{ not json")
    with pytest.raises(IncompleteRunError, match="corrupt"):
        qkviz.open_run(damaged)
    (damaged / run_files.MANIFEST).unlink()
    with pytest.raises(IncompleteRunError, match="not a complete qkviz run"):
        qkviz.open_run(damaged)
    with pytest.raises(QkvizError, match="no run at"):
        qkviz.open_run(tmp_path / "missing")


def test_out_of_range_heads_are_clear_errors(bert_run):
    with pytest.raises(QkvizError, match="layer 2 is out of range 0-1"):
        bert_run.queries(2, 0)
    with pytest.raises(QkvizError, match="head 4 is out of range 0-3"):
        bert_run.keys(0, 4)


def test_core_imports_without_torch(tmp_path, bert_run):
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "import qkviz\n"
            f"run = qkviz.open_run({str(bert_run.path)!r})\n"
            "print(run.attention(0, 0, 0).sum(axis=1).round(6).tolist())")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert set(eval(result.stdout)) == {1.0}
