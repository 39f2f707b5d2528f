"""The top bar's line on the layouts being made in the background (``qkviz serve`` on a run without its
default layouts), and the poll that lets the views switch each head in as its layout lands.

Every :data:`POLL_MS` the line is redrawn from the run's :class:`qkviz.projection.LayoutProgress`, and
``LAYOUT_STAMP`` takes the number of layouts landed, as does the layout stamp of the view that shows
(:func:`dash_app.ids.layout_stamp`); the matrix and single-head views take theirs as an input and redraw when it
changes (no reload). The poll stops once every run's worker is done.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html, no_update

from dash_app import ids
from dash_app.run_data import RunData
from dash_app.state import checked_state
from qkviz.projection import describe_seconds, method_label

POLL_MS = 2000
#: failures named in the line (the rest are counted)
FAILURES_SHOWN = 3


def layout(runs: list[RunData]) -> list:
    """The line and its poll (polling only when some run has a worker)."""
    working = any(data.worker is not None for data in runs)
    return [html.Div(id=ids.LAYOUT_PROGRESS, className="progress-line"),
            dcc.Interval(id=ids.LAYOUT_POLL, interval=POLL_MS, disabled=not working),
            dcc.Store(id=ids.LAYOUT_STAMP, data=None)]


def progress_text(data: RunData) -> list | str:
    """``"attention t-SNE layouts: 23/72 heads · about 3 min left · PCA shown until each lands"``, or ``""``."""
    if data.worker is None:
        return ""
    progress = data.worker.progress()
    name = method_label(progress.method)
    total_heads = data.n_total_heads
    have = total_heads - progress.total + progress.done
    parts = [html.B(f"{name} layouts: {have}/{total_heads} heads")]
    if progress.running:
        left = (f"about {describe_seconds(progress.remaining_seconds)} left" if progress.remaining_seconds is not None
                else "estimating the time left")
        parts.append(f" · being made in the background, {left}; heads still waiting are drawn in PCA")
    else:
        parts.append(f" · made in {describe_seconds(progress.elapsed_seconds)}")
    if progress.failed:
        named = [f"L{layer} H{head}: {error}" for (layer, head), error in sorted(progress.failed.items())[:FAILURES_SHOWN]]
        more = len(progress.failed) - FAILURES_SHOWN
        parts.append(html.Span(f" · {len(progress.failed)} failed ({'; '.join(named)}"
                               f"{f'; {more} more' if more > 0 else ''})", className="failed"))
    return parts


def register(app: dash.Dash, runs: list[RunData], views: list[str]) -> None:
    """The line and the stamps: the shell's and those of ``views`` (the names of the app's views)."""
    @app.callback(Output(ids.LAYOUT_PROGRESS, "children"), Output(ids.LAYOUT_POLL, "disabled"),
                  Input(ids.LAYOUT_POLL, "n_intervals"), Input(ids.STATE, "data"))
    def show_progress(_, current):
        shown = runs[checked_state(current, runs).run]
        running = any(data.worker is not None and data.worker.progress().running for data in runs)
        return progress_text(shown), not running

    # the stamps only on the poll: were they outputs of the callback above, every change of state would hold the
    # views' drawing (which takes a stamp as input) back until that callback had answered. A view's own stamp is
    # written only while it shows: a hidden view draws nothing, and one not shown yet has no graphs in the page
    @app.callback(Output(ids.LAYOUT_STAMP, "data"), *(Output(ids.layout_stamp(view), "data") for view in views),
                  Input(ids.LAYOUT_POLL, "n_intervals"), State(ids.LAYOUT_STAMP, "data"), State(ids.STATE, "data"))
    def stamp_landed(_, stamp, current):
        progresses = [None if data.worker is None else data.worker.progress() for data in runs]
        landed = [None if progress is None else [progress.done, len(progress.failed)] for progress in progresses]
        if landed == stamp:
            return no_update, *(no_update for _ in views)
        shown = checked_state(current, runs).view
        return landed, *(landed if view == shown else no_update for view in views)
