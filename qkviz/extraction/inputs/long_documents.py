"""What is done with a document longer than one sequence: split into overlapping windows (``--chunk N
--chunk-overlap M``), or refused with its count (``--max-length`` truncates instead; see
:mod:`qkviz.extraction.inputs.selection`).

A document is tokenized once, whole. Each window is then one sequence of the run: the special tokens the
tokenizer puts around any text (``<bos>``, or ``[CLS] ... [SEP]``), then a slice of the document's text tokens,
``N`` tokens in all (the last window may be shorter). Consecutive windows share ``M`` text tokens (default
``N // 8``), so that a token near a window's start also appears, with more context before it, at the end of
the window before. Each window's positions start at 0, as a sentence's do: what is stored is exactly what the
model computes for that window alone (a window does not see the tokens before it).

A window records where it came from (the run's sentence table, see ``docs/run-format.md``): its document
(``corpus_index``), the index of its first text token among the document's text tokens (``token_offset``)
and the character where its text starts in the document (``char_offset``); its ``text`` is the document's
characters from its first text token to its last, and its tokens' character offsets are into that text.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option_with_n
from qkviz.extraction.inputs.selection import TokenizedSentence

#: what :func:`qkviz.extraction.inputs.selection.select_sentences` does with each tokenized document
DocumentRule = Callable[[TokenizedSentence], list[TokenizedSentence]]


def default_overlap(size: int) -> int:
    """The overlap of windows of ``size`` tokens when none is given: an eighth of a window."""
    return size // 8


def windows_of(size: int, overlap: int) -> DocumentRule:
    """The rule that splits a document longer than ``size`` tokens into windows (see the module)."""
    return lambda document: split_into_windows(document, size, overlap)


def refused_past(context: int | None, limit_name: str | None = None) -> DocumentRule:
    """The rule that refuses a document longer than ``context`` tokens in one line, with its count; ``limit_name``
    says what the limit is where it is not the model's context."""
    limit = (limit_name or f"the model's context of {context:,}") if context is not None else ""

    def check(document: TokenizedSentence) -> list[TokenizedSentence]:
        if context is not None and len(document) > context:
            raise QkvizError(f"document {document.corpus_index + 1} ({_excerpt(document.text)}) has "
                             f"{len(document):,} tokens, more than {limit}: give {option_with_n('chunk')} "
                             f"(or {option_with_n('max_length')} to truncate)")
        return [document]
    return check


def _excerpt(text: str, width: int = 30) -> str:
    short = " ".join(text[:4 * width].split())
    return repr(short if len(short) <= width else short[:width] + "...")


def split_into_windows(document: TokenizedSentence, size: int, overlap: int) -> list[TokenizedSentence]:
    """``document`` (tokenized whole, with its special tokens) as windows of at most ``size`` tokens sharing
    ``overlap`` text tokens; a document that fits is itself. ``size`` must leave more than ``overlap`` text
    tokens after the special tokens (checked once, by the caller)."""
    if len(document) <= size:
        return [document]
    prefix, suffix = _special_ends(document.special)
    body = size - prefix - suffix
    if body <= overlap:
        raise ValueError(f"windows of {size} tokens hold {body} text tokens, not more than the overlap {overlap}")
    n_text = len(document) - prefix - suffix
    windows, start = [], 0
    while True:
        end = min(start + body, n_text)
        windows.append(_window(document, prefix, suffix, start, end))
        if end == n_text:
            return windows
        start += body - overlap


def _special_ends(special: tuple[bool, ...]) -> tuple[int, int]:
    """How many special tokens open and close a tokenized text."""
    prefix = next((i for i, s in enumerate(special) if not s), len(special))
    suffix = next((i for i, s in enumerate(reversed(special)) if not s), 0)
    return prefix, suffix


def _window(document: TokenizedSentence, prefix: int, suffix: int, start: int, end: int) -> TokenizedSentence:
    """The window of the document's text tokens ``start:end`` (counted after its opening special tokens)."""
    n = len(document)
    body = range(prefix + start, prefix + end)
    kept = [*range(prefix), *body, *range(n - suffix, n)]
    spans = [document.offsets[i] for i in body if not document.special[i]]
    char_start = min((a for a, _ in spans), default=0)
    char_end = max((b for _, b in spans), default=0)
    offsets = tuple((0, 0) if document.special[i] else
                    (document.offsets[i][0] - char_start, document.offsets[i][1] - char_start) for i in kept)
    return replace(document, text=document.text[char_start:char_end],
                   token_ids=tuple(document.token_ids[i] for i in kept), offsets=offsets,
                   special=tuple(document.special[i] for i in kept), truncated=False,
                   token_offset=start, char_offset=char_start)
