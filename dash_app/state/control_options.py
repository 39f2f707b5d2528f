"""The options of the controls that set a field of the view state, as the state callback sends them.

Each is ``options(data, state, previous)`` (see ``ControlOptions`` in :mod:`dash_app.state.view_registry`): the run
shown, the state after the action and the one before it (None on first load); ``dash.no_update`` leaves the
options the control has. A view names these for its controls in its ``options``.
"""

from __future__ import annotations

from dash import dcc, no_update

from dash_app.data.run_data import RunData
from dash_app.state.view_state import ViewState
from qkviz.report import COLOURS


def run_changed(state: ViewState, previous: ViewState | None) -> bool:
    """Whether the action showed another run (or the page just loaded)."""
    return previous is None or previous.run != state.run


def numbers(count: int) -> list[dict]:
    return [{"label": str(i), "value": i} for i in range(count)]


def offered_sequences(texts, typed: str, current: int | None, limit: int) -> list[int]:
    """The sequences a sentence or document selector offers: the first ``limit`` whose text holds ``typed``
    (case-insensitive, spaces around it ignored) or whose number starts with it, and the ``current`` one whatever it
    is (a dropdown shows its value only among its options), in order."""
    typed = typed.strip().lower()
    chosen = [index for index, text in enumerate(texts)
              if not typed or str(index).startswith(typed) or typed in str(text).lower()][:limit]
    if current is not None and 0 <= current < len(texts) and current not in chosen:
        chosen = sorted([*chosen, current])
    return chosen


def layer_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The run's layers, sent when the run changes."""
    return numbers(data.run.n_layers) if run_changed(state, previous) else no_update


def head_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The run's heads, sent when the run changes."""
    return numbers(data.run.n_heads) if run_changed(state, previous) else no_update


def colour_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The colourings the run offers (an image run's or a text run's), sent when the run changes."""
    return [{"label": COLOURS[name], "value": name} for name in data.colours] if run_changed(state, previous) else no_update


def weighting_labels(data: RunData) -> dict[str, str]:
    """What the weighting switch calls its two choices for the run: value weighting is ``a . |W_O v|`` where the
    run keeps output norms, else (an older run, a family whose output is gated) ``a . |v|``, and it says so."""
    value = ("value-weighted: α·‖W_O v‖" if data.run.has_output_norms
             else "value-weighted: α·‖v‖ (no ‖W_O v‖ in this run)")
    return {"attention": "attention α", "value": value}


def weighting_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The weighting switch's two choices (:func:`weighting_labels`), sent when the run changes."""
    if not run_changed(state, previous):
        return no_update
    return [{"label": label, "value": value} for value, label in weighting_labels(data).items()]


def weighting_switch(control: str) -> dcc.RadioItems:
    """A view's attention / value-weighted switch (its options come with the run: :func:`weighting_options`)."""
    return dcc.RadioItems(id=control, value=ViewState.weighting, inline=True, className="weighting-switch",
                          options=[{"label": label, "value": value} for value, label in
                                   (("attention", "attention α"), ("value", "value-weighted"))])
