"""The matrix view's filter: which heads a head-atlas statistic (a range) or labels keep (a head is kept when it earns
any of them, :mod:`qkviz.analysis.labels.label_table`), and the line that says so."""

from __future__ import annotations

import numpy as np

from dash_app.data.atlas_columns import LABEL_SORT, column_name, format_value
from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState
from qkviz.analysis import LABELS

NO_FILTER = [{"label": "nothing (every head)", "value": ""}]


def filter_values(data: RunData, state: ViewState) -> np.ndarray | None:
    """float64 ``[flat head]``: the values the filter reads (label indices for ``label``), None without a filter."""
    return data.atlas_grid(state.filter_by) if state.filter_by and state.filter_by in data.atlas_sorts() else None


def filter_mask(data: RunData, state: ViewState) -> np.ndarray | None:
    """bool ``[flat head]``: the heads the filter keeps (a label among ``filter_labels``, or a value within
    ``[filter_min, filter_max]``; a head without a value is left out), None when nothing is filtered."""
    values = filter_values(data, state)
    if values is None:
        return None
    if state.filter_by == LABEL_SORT:
        return carrying(data, state.filter_labels) if state.filter_labels else None
    if state.filter_min is None and state.filter_max is None:
        return None
    low = -np.inf if state.filter_min is None else state.filter_min
    high = np.inf if state.filter_max is None else state.filter_max
    with np.errstate(invalid="ignore"):
        return (values >= low) & (values <= high)


def carrying(data: RunData, labels) -> np.ndarray:
    """bool ``[flat head]``: the heads that earn any of ``labels`` (the atlas's label table: a head carries every
    label it earns), or whose strongest label is one of them (image runs have only that)."""
    kept = np.isin(data.atlas_grid(LABEL_SORT), [LABELS.index(label) for label in labels])
    earned = data.atlas().labels
    earned = earned[earned.label.isin(list(labels))]
    kept[earned["layer"].to_numpy(int) * data.run.n_heads + earned["head"].to_numpy(int)] = True
    return kept


def filter_message(data: RunData, state: ViewState, kept: np.ndarray | None) -> str:
    """A line naming the filter, how many heads it keeps and the column's range, or what to choose next."""
    values = filter_values(data, state)
    if values is None:
        return ""
    name = "label (any it earns)" if state.filter_by == LABEL_SORT else column_name(state.filter_by)
    if kept is None:
        if state.filter_by == LABEL_SORT:
            return "Filter: choose the labels to keep."
        finite = values[np.isfinite(values)]
        span = (f" ({format_value(state.filter_by, finite.min())} to {format_value(state.filter_by, finite.max())} "
                "over the heads)") if len(finite) else ""
        return f"Filter: give a range of {name}{span}."
    rest = "left out" if state.filter_mode == "hide" else "faded"
    return f"Filter: {int(kept.sum()):,} of {len(kept):,} heads kept by {name}; the others {rest}."
