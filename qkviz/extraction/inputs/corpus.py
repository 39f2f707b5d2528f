"""Reading a corpus of sentences: text, JSONL, CSV, Parquet, a Hugging Face dataset, or strings in memory.

A text file holds one sentence per line (blank lines skipped); tabular files need the column
that holds the text (``text_column``, default ``"text"``). In memory, any iterable of strings is a
corpus (a list, a generator, a pandas Series, a ``datasets`` column), and so are a pandas DataFrame or
a Hugging Face ``datasets.Dataset`` with a ``text_column``. Sentences are stripped and blank ones
skipped, whatever the source. The corpus hash covers the sentences as read, so the same sentences from
another file format, or from a list, give the same run fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option

DEFAULT_CORPUS = Path(__file__).resolve().parents[3] / "data" / "sentences.txt"
TABULAR_SUFFIXES = {".jsonl", ".csv", ".parquet"}
FILE_SUFFIXES = TABULAR_SUFFIXES | {".txt", ".text", ".json", ".tsv"}
#: the largest corpus file read (a run holds at most millions of tokens: a few hundred MB of text)
MAX_CORPUS_BYTES = 2_000_000_000


@dataclass(frozen=True)
class Corpus:
    source: str
    sentences: tuple[str, ...]
    text_column: str | None

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for sentence in self.sentences:
            digest.update(sentence.encode("utf-8"))
            digest.update(b"\n")
        return digest.hexdigest()


def load_corpus(source, text_column: str = "text") -> Corpus:
    """Read sentences from ``source`` (a path or dataset name, or strings in memory: see the module); every
    failure is a one-line :class:`QkvizError`."""
    if not isinstance(source, (str, os.PathLike)):
        return corpus_in_memory(source, text_column)
    path = Path(source)
    if path.is_dir():
        raise QkvizError(f"corpus {path} is a directory; give a text, JSONL, CSV or Parquet file")
    if path.exists() and not path.is_file():
        raise QkvizError(f"corpus {path} is not a regular file (a device or a pipe); give a text, JSONL, CSV or "
                         "Parquet file")
    if path.exists() and path.stat().st_size > MAX_CORPUS_BYTES:
        raise QkvizError(f"corpus {path} is {path.stat().st_size / 1e9:.1f} GB, more than qkviz reads "
                         f"({MAX_CORPUS_BYTES / 1e9:.0f} GB); give a sample of it")
    if path.exists():
        if path.suffix.lower() in TABULAR_SUFFIXES:
            sentences = _read_tabular(path, text_column)
            column = text_column
        else:
            sentences = _read_text_lines(path)
            column = None
    elif path.suffix.lower() in FILE_SUFFIXES or str(source).startswith((".", "/", "~")):
        raise QkvizError(f"corpus file {path} does not exist")
    else:
        sentences = _read_hub_dataset(str(source), text_column)
        column = text_column
    if not sentences:
        raise QkvizError(f"corpus {source} has no sentences (every line or row is empty)")
    return Corpus(source=str(source), sentences=tuple(sentences), text_column=column)


def _read_text_lines(path: Path) -> list[str]:
    sentences = []
    with open(path, "rb") as handle:
        lines = [line.rstrip(b"\r\n") for line in handle]
    for number, line in enumerate(lines, start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise QkvizError(f"corpus {path} line {number} is not UTF-8 ({error.reason} at byte {error.start}); "
                             "re-encode the file as UTF-8") from None
        text = text.strip().lstrip("\ufeff")
        if text:
            sentences.append(text)
    return sentences


def _read_tabular(path: Path, text_column: str) -> list[str]:
    import pandas as pd

    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            return _read_jsonl(path, text_column)
        if suffix == ".csv":
            frame = pd.read_csv(path, encoding="utf-8", dtype=str, keep_default_na=False)
        else:
            frame = pd.read_parquet(path)
    except UnicodeDecodeError as error:
        raise QkvizError(f"corpus {path} is not UTF-8 ({error.reason}); re-encode the file as UTF-8") from None
    except (ValueError, OSError) as error:
        raise QkvizError(f"corpus {path} cannot be read as {suffix[1:].upper()}: {str(error).splitlines()[0]}") from None
    if text_column not in frame.columns:
        columns = ", ".join(map(str, frame.columns)) or "none"
        raise QkvizError(f"corpus {path} has no column {text_column!r} (columns: {columns}); choose one with "
                         f"{option('text_column', None)}")
    return [_text_of(value, path, f"row {number}", text_column) for number, value in
            enumerate(frame[text_column], start=2 if suffix == ".csv" else 1)
            if not (isinstance(value, str) and not value.strip())]


def _text_of(value, path: Path, where: str, text_column: str) -> str:
    """The text of one row, stripped; a row whose text is missing, null, a number or a list is refused in one
    line (storing ``"nan"`` or ``"[1, 2]"`` as a sentence would be a silently wrong run)."""
    if not isinstance(value, str):
        shown = "missing" if value is None or value != value else f"{type(value).__name__} {str(value)[:40]!r}"
        raise QkvizError(f"corpus {path} {where}: {text_column!r} is {shown}, not text; fix or remove the row")
    return value.strip()


def _read_jsonl(path: Path, text_column: str) -> list[str]:
    sentences, seen_column = [], False
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise QkvizError(f"corpus {path} line {number} is not valid JSON ({error.msg})") from None
            if not isinstance(row, dict):
                raise QkvizError(f"corpus {path} line {number} is not a JSON object")
            if text_column not in row:
                if not seen_column and not sentences:
                    raise QkvizError(f"corpus {path} has no column {text_column!r} (columns: "
                                     f"{', '.join(map(str, row)) or 'none'}); choose one with "
                                     f"{option('text_column', None)}")
                raise QkvizError(f"corpus {path} line {number}: {text_column!r} is missing, not text; fix or remove "
                                 "the row")
            seen_column = True
            text = _text_of(row[text_column], path, f"line {number}", text_column)
            if text:
                sentences.append(text)
    return sentences


def load_hub_dataset(name: str, what: str = "corpus"):
    """``name`` or ``name:split`` of a Hugging Face dataset, when the hub and ``datasets`` are there; ``what``
    names the source in the one-line errors (``"corpus"``, ``"images"``)."""
    dataset_name, _, split = name.partition(":")
    try:
        import datasets
    except ImportError:
        raise QkvizError(f"{what} {name} is neither a file nor loadable: loading a Hugging Face dataset needs "
                         "'pip install datasets' and network access to the hub") from None
    try:
        return datasets.load_dataset(dataset_name, split=split or "train")
    except Exception as error:  # the hub, the network or the name: all one message for the user
        raise QkvizError(f"{what} {name} is not a file, and loading it as a Hugging Face dataset failed "
                         f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else 'no detail'})") from None


def _read_hub_dataset(name: str, text_column: str) -> list[str]:
    dataset = load_hub_dataset(name)
    if text_column not in dataset.column_names:
        raise QkvizError(f"dataset {name} has no column {text_column!r} (columns: {', '.join(dataset.column_names)}); "
                         f"choose one with {option('text_column', None)}")
    return [text.strip() for text in dataset[text_column] if isinstance(text, str) and text.strip()]


def corpus_in_memory(source, text_column: str = "text") -> Corpus:
    """The sentences of an iterable of strings, or of a DataFrame's / ``datasets.Dataset``'s ``text_column``."""
    kind = type(source).__name__
    column = None
    if isinstance(source, bytes | bytearray):
        raise QkvizError("corpus is bytes; decode it to text (a str is read as a file path or dataset name)")
    if hasattr(source, "column_names") or hasattr(source, "columns"):   # a datasets.Dataset / pandas DataFrame
        names = list(getattr(source, "column_names", None) or getattr(source, "columns", []))
        if text_column not in names:
            raise QkvizError(f"corpus {kind} has no column {text_column!r} (columns: "
                             f"{', '.join(map(str, names)) or 'none'}); choose one with text_column=")
        source, column, kind = source[text_column], text_column, f"{kind} column {text_column!r}"
    elif isinstance(source, Mapping):
        raise QkvizError(f"corpus is a {kind}; give an iterable of strings (e.g. list(corpus.values()))")
    if not isinstance(source, Iterable):
        raise QkvizError(f"corpus is of type {kind}: give a file path, a dataset name, or an iterable of strings")
    sentences = []
    for index, item in enumerate(source):
        if not isinstance(item, str):
            missing = item is None or (isinstance(item, float) and item != item)
            shown = "missing" if missing else f"{type(item).__name__} {str(item)[:40]!r}"
            raise QkvizError(f"corpus item {index} is {shown}, not text; give strings only")
        if item.strip():
            sentences.append(item.strip())
    if not sentences:
        raise QkvizError(f"corpus ({kind}) has no sentences: it is empty or every item is blank")
    return Corpus(source=f"{kind} of {len(sentences)} sentences in memory", sentences=tuple(sentences),
                  text_column=column)
