"""The options of the controls that set a field of the view state, as the state callback sends them.

Each is ``options(data, state, previous)`` (see ``ControlOptions`` in :mod:`dash_app.view_registry`): the run
shown, the state after the action and the one before it (None on first load); ``dash.no_update`` leaves the
options the control has. A view names these for its controls in its ``options``.
"""

from __future__ import annotations

from dash import no_update

from dash_app.run_data import RunData
from dash_app.state import ViewState
from qkviz.report import COLOURS


def run_changed(state: ViewState, previous: ViewState | None) -> bool:
    """Whether the action showed another run (or the page just loaded)."""
    return previous is None or previous.run != state.run


def numbers(count: int) -> list[dict]:
    return [{"label": str(i), "value": i} for i in range(count)]


def layer_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The run's layers, sent when the run changes."""
    return numbers(data.run.n_layers) if run_changed(state, previous) else no_update


def head_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The run's heads, sent when the run changes."""
    return numbers(data.run.n_heads) if run_changed(state, previous) else no_update


def colour_options(data: RunData, state: ViewState, previous: ViewState | None):
    """The colourings the run offers (an image run's or a text run's), sent when the run changes."""
    return [{"label": COLOURS[name], "value": name} for name in data.colours] if run_changed(state, previous) else no_update
