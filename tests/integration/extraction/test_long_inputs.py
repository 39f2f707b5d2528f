"""Documents longer than the model's context (tiny models: contexts of 128-256 tokens): split into windows
with --chunk (exact, each with its document and offset), refused in one line without it, a 1 MB line, and
documents from JSONL and Parquet."""

import json

import pandas as pd
import pytest
from support.attention_check import max_attention_error
from support.cli import one_line_error, run_main
from support.tiny_models import CONTEXT
from transformers import AutoTokenizer

import qkviz
from qkviz.extraction.streaming.text_capture import pad_token_id


@pytest.fixture(scope="module")
def documents(corpus_sentences) -> list[str]:
    """A short document, then two of several hundred tokens (longer than every tiny model's context)."""
    return [corpus_sentences[0], " ".join(corpus_sentences[1:60]), " ".join(corpus_sentences[60:100])]


@pytest.fixture(scope="module")
def document_file(documents, tmp_path_factory):
    path = tmp_path_factory.mktemp("documents") / "documents.txt"
    path.write_text("\n".join(documents) + "\n", encoding="utf-8")
    return path


def token_ids(model_dir, text: str) -> list[int]:
    return AutoTokenizer.from_pretrained(model_dir)(text)["input_ids"]


@pytest.mark.parametrize("family, chunk, overlap", [("llama", 64, 8), ("bert", 50, None)])
def test_a_chunked_run_holds_each_window_with_its_document_and_offset_and_is_exact(
        family, chunk, overlap, tiny_model, documents, tmp_path):
    model_dir = tiny_model(family)
    assert len(token_ids(model_dir, documents[1])) > CONTEXT
    run = qkviz.extract(str(model_dir), documents, tmp_path / "run", chunk=chunk, chunk_overlap=overlap,
                        batch_size=4, progress=False)
    overlap = chunk // 8 if overlap is None else overlap
    assert run.manifest["selection"]["chunk"] == chunk and run.manifest["selection"]["chunk_overlap"] == overlap
    table = run.sentences
    assert list(table.columns[-2:]) == ["token_offset", "char_offset"]
    assert table.n_tokens.max() == chunk and table.corpus_index.tolist() == sorted(table.corpus_index)
    special = AutoTokenizer.from_pretrained(model_dir).num_special_tokens_to_add()
    for index, text in enumerate(documents):
        windows = table[table.corpus_index == index]
        whole = token_ids(model_dir, text)
        text_ids = whole[1:len(whole) - (special - 1)]
        if len(whole) <= chunk:
            assert len(windows) == 1 and windows.token_offset.iloc[0] == 0 and windows.text.iloc[0] == text
            continue
        assert windows.token_offset.tolist() == list(range(0, len(text_ids), chunk - special - overlap))[
            :len(windows)]
        for sentence, row in windows.iterrows():
            stored = run.tokens.token_id.to_numpy()[run.sentence_tokens(sentence)].tolist()
            body = stored[1:len(stored) - (special - 1)]
            assert body == text_ids[row.token_offset:row.token_offset + len(body)]
            assert text[row.char_offset:row.char_offset + len(row.text)] == row.text
        last = windows.iloc[-1]
        assert last.token_offset + last.n_tokens - special == len(text_ids)     # the windows reach the end
    error, departure = max_attention_error(run, model_dir, list(range(run.n_sentences)),
                                           pad_token_id(AutoTokenizer.from_pretrained(model_dir)))
    assert error <= 1e-5 and departure > 0.2


def test_a_document_longer_than_the_context_is_refused_with_its_count_and_nothing_is_written(
        tiny_model, documents, tmp_path):
    model_dir = tiny_model("llama")
    corpus = tmp_path / "documents.txt"
    corpus.write_text("\n".join(documents[:2]) + "\n", encoding="utf-8")
    n_tokens = len(token_ids(model_dir, documents[1]))
    one_line_error(run_main("extract", "--model", str(model_dir), "--corpus", str(corpus), "--out",
                            str(tmp_path / "run")),
                   f"error: document 2 ({documents[1][:30] + '...'!r}) has {n_tokens:,} tokens, more than the model's "
                   "context of 256: give --chunk N (or --max-length N to truncate)")
    assert not (tmp_path / "run").exists()


def test_a_document_longer_than_the_context_names_chunk_in_the_callers_words(tiny_model, documents, tmp_path):
    """Issue 49: qkviz.extract over a document longer than the context told a Python caller to give --chunk N; it
    is told chunk=N (or max_length=N), and qkviz extract still --chunk N (or --max-length N)."""
    model_dir = tiny_model("llama")
    corpus = tmp_path / "documents.txt"
    corpus.write_text("\n".join(documents[:2]) + "\n", encoding="utf-8")
    with pytest.raises(qkviz.QkvizError) as refused:
        qkviz.extract(str(model_dir), corpus, tmp_path / "python", progress=False)
    message = str(refused.value)
    assert message.endswith("more than the model's context of 256: give chunk=N (or max_length=N to truncate)")
    assert "--chunk" not in message and "\n" not in message
    assert not (tmp_path / "python").exists()
    line = one_line_error(run_main("extract", "--model", str(model_dir), "--corpus", str(corpus), "--out",
                                   str(tmp_path / "cli")),
                          "more than the model's context of 256: give --chunk N (or --max-length N to truncate)")
    assert "chunk=" not in line and not (tmp_path / "cli").exists()


@pytest.mark.parametrize("options, message", [
    (["--chunk", "64", "--max-length", "64"], "give --chunk (split long documents into windows) or --max-length"),
    (["--chunk-overlap", "4"], "--chunk-overlap needs --chunk N"),
    (["--chunk", "64", "--chunk-overlap", "64"], "--chunk-overlap must be from 0 to --chunk - 1 (63), got 64"),
    (["--chunk", "300"], "--chunk 300 is longer than the model's context (256); use at most 256"),
    (["--chunk", "9", "--chunk-overlap", "8"], "--chunk 9 holds 8 text tokens after the tokenizer's 1 special"),
    (["--chunk", "1"], "argument --chunk: 1 is out of range"),
])
def test_bad_chunk_options_are_one_line(options, message, tiny_model, document_file, tmp_path):
    one_line_error(run_main("extract", "--model", str(tiny_model("llama")), "--corpus", str(document_file), "--out",
                            str(tmp_path / "run"), *options), message)
    assert not (tmp_path / "run").exists()


def test_a_one_megabyte_line_is_refused_with_its_count_or_chunked(tiny_model, corpus_sentences, tmp_path):
    model_dir = tiny_model("llama")
    text = " ".join(corpus_sentences)
    line = (text + " ") * (2**20 // len(text) + 1)
    corpus = tmp_path / "huge.txt"
    corpus.write_text("A short first sentence.\n" + line.strip() + "\n", encoding="utf-8")
    assert corpus.stat().st_size > 2**20
    one_line_error(run_main("extract", "--model", str(model_dir), "--corpus", str(corpus), "--out",
                            str(tmp_path / "refused")), "document 2 (", "tokens, more than the model's context of 256")
    assert not (tmp_path / "refused").exists()
    run = qkviz.extract(str(model_dir), corpus, tmp_path / "run", chunk=128, max_tokens=2000, progress=False)
    windows = run.sentences[run.sentences.corpus_index == 1]
    assert len(windows) >= 10 and windows.n_tokens.max() == 128
    assert windows.token_offset.tolist() == [i * (127 - 16) for i in range(len(windows))]
    truncated = qkviz.extract(str(model_dir), corpus, tmp_path / "truncated", max_length=256, progress=False)
    assert truncated.manifest["counts"]["n_truncated_sentences"] == 1


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_documents_from_a_jsonl_or_parquet_column_are_chunked_like_lines(suffix, tiny_model, documents,
                                                                         document_file, tmp_path):
    model_dir = str(tiny_model("llama"))
    path = tmp_path / f"documents{suffix}"
    rows = [{"id": number, "body": text} for number, text in enumerate(documents)]
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    else:
        pd.DataFrame(rows).to_parquet(path)
    one_line_error(run_main("extract", "--model", model_dir, "--corpus", str(path), "--out", str(tmp_path / "no"),
                            "--text-column", "body"), "error: document ", "more than the model's context of 256")
    run = qkviz.extract(model_dir, path, tmp_path / "run", text_column="body", chunk=96, progress=False)
    from_lines = qkviz.extract(model_dir, document_file, tmp_path / "lines", chunk=96, progress=False)
    columns = ["corpus_index", "text", "n_tokens", "token_offset", "char_offset"]
    assert run.sentences[columns].equals(from_lines.sentences[columns])
    assert run.sentences.corpus_index.nunique() == 3 and run.n_sentences > 3
