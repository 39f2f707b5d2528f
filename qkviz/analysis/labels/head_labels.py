"""The single pattern label of an image run's head (the attention-pattern chapter of the seeds). Text runs' heads
earn several labels each: :mod:`qkviz.analysis.labels.label_table`. The labels and their thresholds are declared in
:mod:`qkviz.analysis.labels.registry`.

Rules, with :class:`~qkviz.analysis.labels.registry.LabelThresholds` (all exposed): among the argmax shares -- ``previous-token``
(offset -1), ``next-token`` (+1), ``self`` (0), ``fixed-offset`` (the most frequent offset
``|o| >= 2``, named in the label, e.g. ``fixed-offset -2``), ``first-token`` (the first token:
a sink), ``delimiter`` (special or punctuation tokens) -- the largest, when it reaches
``argmax_share``; ties go to the earlier name in that list, except that the first token wins over
delimiter. Otherwise ``broad`` when the normalised entropy reaches ``broad_entropy``, else
``content``: attention that follows what the tokens are, not where.

Image runs (their statistics hold ``argmax_neighbour``, see :mod:`qkviz.analysis.statistics.head_stats`) place the
strongest key on the patch grid instead: ``left-patch``, ``right-patch``, ``neighbour-patch`` (any of the
4 adjacent patches), ``same-row`` and ``same-column`` (2 or more patches away), then ``self``,
``first-token`` (CLS) and ``delimiter`` (the other special tokens: distillation token, registers).
Each label's share is its :attr:`~qkviz.analysis.labels.registry.HeadLabel.argmax`; the lists are the registry's
labels that have one, in its order (an image run's own labels first).
"""

from __future__ import annotations

from qkviz.analysis.labels.registry import (BOTH, BROAD, CONTENT, FIXED_OFFSET, HEAD_LABELS, IMAGE, NEIGHBOUR_PATCH,
                                           LabelThresholds)

#: a text head's candidates, ties going to the earlier
TEXT_SHARES = tuple(label for label in HEAD_LABELS if label.argmax and label.runs != IMAGE)
#: an image head's candidates: the places on the patch grid, then the labels it shares with text heads
IMAGE_SHARES = (*(label for label in HEAD_LABELS if label.argmax and label.runs == IMAGE),
                *(label for label in HEAD_LABELS if label.argmax and label.runs == BOTH))


def head_label(statistics: dict[str, float], thresholds: LabelThresholds = LabelThresholds()) -> tuple[str, str]:
    """``(label, detail)``: the label (one of :data:`~qkviz.analysis.labels.registry.LABELS`) and the figure that
    decided it."""
    image = NEIGHBOUR_PATCH.argmax in statistics    # an image run's head: places on the patch grid
    shares = [(label.name, statistics[label.argmax]) for label in (IMAGE_SHARES if image else TEXT_SHARES)]
    label, share = max(shares, key=lambda item: item[1])   # max keeps the first of equal shares
    if share >= thresholds.argmax_share:
        if label == FIXED_OFFSET.name:
            return label, f"offset {int(statistics['offset']):+d}: {share:.1%} of queries"
        return label, f"{share:.1%} of queries"
    if statistics["entropy_normalised"] >= thresholds.broad_entropy:
        return BROAD.name, f"normalised entropy {statistics['entropy_normalised']:.2f}"
    return CONTENT.name, (f"strongest share {share:.1%} ({label}), normalised entropy "
                          f"{statistics['entropy_normalised']:.2f}")
