"""The part of a sentence's text worth showing beside a pair of tokens: all of a short sentence, and of a long
document (thousands of tokens) only the characters around the marked tokens, the cuts shown as ``…``.

An exemplar (the head atlas's strongest pairs) names a query and a key token; the atlas's report page and the
app's head panel show it in its sentence. A 3,000-token document written out in full beside each of 1,024 heads
made a report page of megabytes and a panel that buried its pair.
"""

from __future__ import annotations

#: a text up to this many characters is shown whole
WHOLE_TEXT = 400
#: characters kept on each side of a marked span in a longer text
CONTEXT = 80
ELLIPSIS = "…"


def excerpt_pieces(text: str, spans: list[tuple[int, int, str]], whole: int = WHOLE_TEXT, context: int = CONTEXT
                   ) -> list[tuple[str, str | None]]:
    """``text`` as ``(piece, kind)`` in order: each span ``(start, end, kind)`` of ``spans`` (character
    offsets; one overlapping an earlier one in the list is left out) a piece of that kind, the text between
    them pieces of kind None. A text longer than ``whole`` keeps only ``context`` characters around each span
    (the first ``whole`` characters when there is no span), the parts left out replaced by ``…``."""
    kept: list[tuple[int, int, str]] = []
    for start, end, kind in spans:                        # in the order given: one overlapping an earlier is left out
        if 0 <= start < end <= len(text) and all(end <= other[0] or start >= other[1] for other in kept):
            kept.append((start, end, kind))
    spans = sorted(kept)
    if len(text) <= whole:
        keep = [(0, len(text))]
    elif not spans:
        keep = [(0, whole)]
    else:
        keep = []
        for start, end, _ in spans:
            low, high = max(0, start - context), min(len(text), end + context)
            if keep and low <= keep[-1][1]:
                keep[-1] = (keep[-1][0], max(keep[-1][1], high))
            else:
                keep.append((low, high))
    pieces: list[tuple[str, str | None]] = []
    previous = 0
    for low, high in keep:
        if low > previous:
            pieces.append((ELLIPSIS, None))
        at = low
        for start, end, kind in spans:
            if low <= start and end <= high:
                pieces += [(text[at:start], None), (text[start:end], kind)]
                at = end
        pieces.append((text[at:high], None))
        previous = high
    if previous < len(text):
        pieces.append((ELLIPSIS, None))
    return [(piece, kind) for piece, kind in pieces if piece]


def excerpt(text: str, spans: list[tuple[int, int]], whole: int = WHOLE_TEXT, context: int = CONTEXT) -> str:
    """:func:`excerpt_pieces` as one string (the spans unmarked)."""
    return "".join(piece for piece, _ in excerpt_pieces(text, [(start, end, "") for start, end in spans], whole,
                                                         context))
