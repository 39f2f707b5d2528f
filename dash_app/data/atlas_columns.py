"""The head atlas's columns as the app shows them: names, which ones the panel lists, how values read.

The atlas table (:class:`qkviz.analysis.atlas.head_atlas.HeadAtlas`) has one row per head; every numeric column
but ``layer`` and ``head`` can order and colour the matrix, and ``label`` can too (categorically). Each statistic's
name, share or not and place in the panel are declared in :mod:`qkviz.analysis.statistics.registry`, each label's
tag and colour in :mod:`qkviz.analysis.labels.registry`.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from qkviz.analysis.labels import FIXED_OFFSET, HEAD_LABEL, LABELS
from qkviz.analysis.statistics import PANEL, describe_statistic, is_share

__all__ = ["LABEL_SORT", "PANEL", "column_name", "format_value", "is_share", "label_codes", "label_tag", "signed_format",
           "sort_options", "sortable_columns"]

#: the matrix sort value that orders and colours heads by their pattern label
LABEL_SORT = "label"


def column_name(column: str, image: bool = False) -> str:
    """What a person reads for a column (``"logit share: key_prior"`` for ``share_key_prior``; ``image``: an image
    run's wording), as :mod:`qkviz.analysis.statistics.registry` declares it."""
    return describe_statistic(column, image)


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
    """float64 ``[n]``: each label's index in :data:`qkviz.analysis.labels.registry.LABELS` (NaN when unknown or missing)."""
    codes = {label: float(number) for number, label in enumerate(LABELS)}
    return np.array([codes.get(label, np.nan) for label in labels], dtype=np.float64)


def label_tag(label: str, offset: float | None = None) -> str:
    """The short tag of a label (``"offset -2"`` for a fixed-offset head when its offset is given)."""
    tag = HEAD_LABEL[label].tag if label in HEAD_LABEL else str(label)
    if label == FIXED_OFFSET.name and offset is not None and not math.isnan(offset):
        tag += f" {int(offset):+d}"
    return tag
