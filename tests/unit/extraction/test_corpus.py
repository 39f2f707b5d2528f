"""Corpus formats and their errors."""

import json

import pandas as pd
import pytest

from qkviz.extraction.inputs.corpus import load_corpus
from qkviz.core.errors import QkvizError

SENTENCES = ["The first sentence.", "A second one, with a comma.", "Third!"]


def test_text_file_one_sentence_per_line_skipping_blank_lines(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\ufeff" + SENTENCES[0] + "\n\n  " + SENTENCES[1] + "  \n" + SENTENCES[2], encoding="utf-8")
    corpus = load_corpus(path)
    assert corpus.sentences == tuple(SENTENCES) and corpus.text_column is None


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_tabular_corpora_read_the_text_column_and_hash_like_text(tmp_path, suffix):
    path = tmp_path / f"c{suffix}"
    frame = pd.DataFrame({"id": [1, 2, 3], "body": SENTENCES})
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(row) for row in frame.to_dict("records")), encoding="utf-8")
    elif suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    corpus = load_corpus(path, text_column="body")
    assert corpus.sentences == tuple(SENTENCES)
    text = tmp_path / "same.txt"
    text.write_text("\n".join(SENTENCES), encoding="utf-8")
    assert corpus.sha256 == load_corpus(text).sha256
    with pytest.raises(QkvizError, match=r"no column 'text' \(columns: id, body\); choose one with text_column$"):
        load_corpus(path)


def test_bad_corpora_get_one_line_errors(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(QkvizError, match="does not exist"):
        load_corpus(missing)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(QkvizError, match="has no sentences"):
        load_corpus(empty)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("fine line\ncaf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(QkvizError, match=r"latin.txt line 2 is not UTF-8"):
        load_corpus(latin)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "ok"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(QkvizError, match="line 2 is not valid JSON"):
        load_corpus(broken)
    with pytest.raises(QkvizError, match="is a directory"):
        load_corpus(tmp_path)


def test_a_dataset_name_without_hub_access_is_a_clear_error():
    with pytest.raises(QkvizError, match="no-such-dataset"):
        load_corpus("no-such-dataset")
