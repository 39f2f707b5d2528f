"""The head atlas's columns as the app shows them: names, which ones the panel lists, how values read.

The atlas table (:class:`qkviz.analysis.atlas.head_atlas.HeadAtlas`) has one row per head; every numeric column
but ``layer`` and ``head`` can order and colour the matrix, and ``label`` can too (categorically).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from qkviz.analysis import LABELS

#: the matrix sort value that orders and colours heads by their pattern label
LABEL_SORT = "label"
NAMES = {
    "mean_distance": "mean distance",
    "mean_distance_no_first": "mean distance, first token left out",
    "entropy": "entropy (nats)",
    "entropy_normalised": "normalised entropy",
    "variability": "variability",
    "argmax_self": "strongest key: itself",
    "argmax_first": "strongest key: first token",
    "argmax_previous": "strongest key: previous token",
    "argmax_next": "strongest key: next token",
    "argmax_delimiter": "strongest key: delimiter",
    "argmax_offset": "strongest key: fixed offset",
    "offset": "most frequent fixed offset",
    "concentration": "concentration (top-1 - top-2)",
    "first_token_attention": "attention to the first token",
    "special_attention": "attention to special tokens",
    "first_token_value_share": "value-weighted share of the first token (α·‖W_O v‖)",
    "special_value_share": "value-weighted share of special tokens (α·‖W_O v‖)",
    "first_token_transmits": "first token: moved / attended (transmits)",
    "special_transmits": "special tokens: moved / attended (transmits)",
    "update_ratio_median": "head update: median norm ratio",
    "update_cosine_mean": "head update: mean cosine",
    "dependency_alignment": "dependency alignment",
    "dependency_alignment_no_first": "dependency alignment, first token left out",
    "argmax_neighbour": "strongest key: an adjacent patch",
    "argmax_same_row": "strongest key: same row, 2+ patches away",
    "argmax_same_col": "strongest key: same column, 2+ patches away",
}
#: an image run's names where they differ (its statistics are on the patch grid: qkviz.analysis.statistics.head_stats)
IMAGE_NAMES = {
    "mean_distance": "mean patch distance",
    "mean_distance_no_first": "mean patch distance, special tokens left out",
    "argmax_previous": "strongest key: patch to the left",
    "argmax_next": "strongest key: patch to the right",
    "argmax_first": "strongest key: first token (CLS)",
    "argmax_delimiter": "strongest key: other special token",
}
#: the side panel's statistics, in this order (``share_*`` logit terms go after ``special_attention``)
PANEL = ("mean_distance", "mean_distance_no_first", "entropy_normalised", "variability", "argmax_self", "argmax_first",
         "argmax_previous", "argmax_next", "argmax_neighbour", "argmax_same_row", "argmax_same_col",
         "argmax_delimiter", "argmax_offset", "concentration",
         "first_token_attention", "special_attention", "first_token_value_share", "first_token_transmits",
         "special_value_share", "special_transmits", "update_ratio_median", "update_cosine_mean",
         "dependency_alignment")
#: short tags for the matrix badges
LABEL_TAGS = {"previous-token": "prev", "next-token": "next", "self": "self", "fixed-offset": "offset",
              "first-token": "first", "delimiter": "delim", "broad": "broad", "content": "content",
              "left-patch": "left", "right-patch": "right", "neighbour-patch": "adjacent", "same-row": "row",
              "same-column": "column", "induction": "induct", "duplicate-token": "dup", "local": "local",
              "dependency": "dep"}


def column_name(column: str, image: bool = False) -> str:
    """What a person reads for a column (``"logit share: key_prior"`` for ``share_key_prior``; ``image``: an image
    run's wording)."""
    if image and column in IMAGE_NAMES:
        return IMAGE_NAMES[column]
    if column in NAMES:
        return NAMES[column]
    if column.startswith("share_"):
        return f"logit share: {column[len('share_'):]}"
    if column.startswith("pos_"):
        return f"attention to {column[len('pos_'):]} (part of speech)"
    if column.startswith("relation_"):
        relation, side = column.removeprefix("relation_").rsplit("_", 1)
        return (f"strongest key: its head word ({relation} → head)" if side == "dependent"
                else f"strongest key: its {relation} dependent (head → {relation})")
    if column.startswith("corpus_"):
        return f"corpus repeats: {column.removeprefix('corpus_').replace('_', '-')} attention"
    return column.replace("_", " ")


def is_share(column: str) -> bool:
    """Columns holding a share of queries or of attention (shown as percentages)."""
    return ((column.startswith(("argmax_", "share_", "pos_", "dependency_alignment", "relation_", "corpus_"))
             and not column.endswith("_queries"))
            or column in ("first_token_attention", "special_attention", "first_token_value_share", "special_value_share"))


def signed_format(value: float, spec: str) -> str:
    """``format(value, spec)``, never a negative zero: a value that rounds to zero is written as 0 is
    (``"0.0"``, ``"+0.000"``, ``"0"``, not ``"-0.0"``)."""
    text = format(value, spec)
    return format(0.0, spec) if text.startswith("-") and float(text) == 0 else text


def format_value(column: str, value: float) -> str:
    """``value`` as the panel and the badges write it: ``"95.4%"``, ``"+0.039"``, ``"-2"``, ``"8.02"``; never a
    negative zero (``"0.0%"`` for a share of -0.0001)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if column == "offset":
        return f"{int(value):+d}"
    if is_share(column):
        return f"{signed_format(100 * value, '.1f')}%"
    if column == "update_cosine_mean":
        return signed_format(value, "+.3f")
    return signed_format(value, ".3g")


def sortable_columns(table: pd.DataFrame) -> tuple[str, ...]:
    """``label`` and every numeric column of the atlas table but ``layer``, ``head`` and the counts and chance levels
    beside a measure (``*_queries``, ``*_chance``)."""
    numeric = [column for column in table.columns
               if column not in ("layer", "head") and not column.endswith(("_queries", "_chance"))
               and pd.api.types.is_numeric_dtype(table[column])]
    return (LABEL_SORT, *numeric)


def sort_options(columns: tuple[str, ...]) -> list[dict]:
    """Dropdown options for the atlas's sorts (statistics highest first; labels in their rule order)."""
    return [{"label": "strongest label (atlas)" if column == LABEL_SORT
             else f"{column_name(column)} (atlas, highest first)", "value": column} for column in columns]


def label_codes(labels: np.ndarray) -> np.ndarray:
    """float64 ``[n]``: each label's index in :data:`qkviz.analysis.labels.head_labels.LABELS` (NaN when unknown or missing)."""
    codes = {label: float(number) for number, label in enumerate(LABELS)}
    return np.array([codes.get(label, np.nan) for label in labels], dtype=np.float64)


def label_tag(label: str, offset: float | None = None) -> str:
    """The short tag of a label (``"offset -2"`` for a fixed-offset head when its offset is given)."""
    tag = LABEL_TAGS.get(label, str(label))
    if label == "fixed-offset" and offset is not None and not math.isnan(offset):
        tag += f" {int(offset):+d}"
    return tag
