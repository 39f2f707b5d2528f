"""The label thresholds, and the single pattern label of an image run's head (the attention-pattern chapter of the
seeds). Text runs' heads earn several labels each: :mod:`qkviz.analysis.labels.label_table`.

Rules, with :class:`LabelThresholds` (all exposed): among the argmax shares -- ``previous-token``
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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

#: every label a head can carry: the text labels of :mod:`qkviz.analysis.labels.label_table` (each head earns any number),
#: then the image runs' single labels
LABELS = ("previous-token", "next-token", "self", "fixed-offset", "first-token", "delimiter", "broad", "content",
          "left-patch", "right-patch", "neighbour-patch", "same-row", "same-column",
          "induction", "duplicate-token", "local", "dependency")


@dataclass(frozen=True)
class LabelThresholds:
    argmax_share: float = 0.5    # share of queries whose strongest key is of one kind
    broad_entropy: float = 0.8   # normalised entropy (1 = uniform) above which a head is broad
    position_mass: float = 0.4   # mean attention at one relative offset (previous-token, self, next-token, offset)
    local_mass: float = 0.5      # mean attention within the local window (qkviz.analysis.labels.label_table.LOCAL_WINDOW)
    first_token: float = 0.3     # Gu et al. 2025's epsilon: mean attention to the first token
    copying: float = 0.3         # mean attention to the induction / duplicate-token target
    relation: float = 0.5        # share of a relation's words whose strongest key is the related word
    min_queries: int = 20        # queries a corpus-measured copying or relation score needs
    over_chance: float = 2.0     # a corpus-measured label also needs this many times a uniform head's score

    def as_dict(self) -> dict:
        return asdict(self)


def head_label(statistics: dict[str, float], thresholds: LabelThresholds = LabelThresholds()) -> tuple[str, str]:
    """``(label, detail)``: the label (one of :data:`LABELS`) and the figure that decided it."""
    if "argmax_neighbour" in statistics:    # an image run's head: places on the patch grid
        shares = [("left-patch", statistics["argmax_previous"]), ("right-patch", statistics["argmax_next"]),
                  ("neighbour-patch", statistics["argmax_neighbour"]), ("same-row", statistics["argmax_same_row"]),
                  ("same-column", statistics["argmax_same_col"]), ("self", statistics["argmax_self"]),
                  ("first-token", statistics["argmax_first"]), ("delimiter", statistics["argmax_delimiter"])]
    else:
        shares = [("previous-token", statistics["argmax_previous"]), ("next-token", statistics["argmax_next"]),
                  ("self", statistics["argmax_self"]), ("fixed-offset", statistics["argmax_offset"]),
                  ("first-token", statistics["argmax_first"]), ("delimiter", statistics["argmax_delimiter"])]
    label, share = max(shares, key=lambda item: item[1])   # max keeps the first of equal shares
    if share >= thresholds.argmax_share:
        if label == "fixed-offset":
            return label, f"offset {int(statistics['offset']):+d}: {share:.1%} of queries"
        return label, f"{share:.1%} of queries"
    if statistics["entropy_normalised"] >= thresholds.broad_entropy:
        return "broad", f"normalised entropy {statistics['entropy_normalised']:.2f}"
    return "content", f"strongest share {share:.1%} ({label}), normalised entropy {statistics['entropy_normalised']:.2f}"
