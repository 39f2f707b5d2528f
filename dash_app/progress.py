"""The top bar's counts of layouts: the line on those being made in the background (``qkviz serve`` on a run
without its default layouts) and the projection menu's options, and the poll that lets the views switch each head
in as its layout lands.

Both counts are :func:`heads_with_layout`. The state callback sends the menu's options on every action; the line
is redrawn on every change of state and every :data:`POLL_MS`, from the run's
:class:`qkviz.projection.LayoutProgress`, and the menu's options (:func:`method_options`) with it when they changed,
so that the two never disagree for longer than a poll. Every poll
``LAYOUT_STAMP`` takes the number of layouts landed, as does the layout stamp of the view that shows
(:func:`dash_app.ids.layout_stamp`); the matrix and single-head views take theirs as an input and redraw when it
changes (no reload). The poll stops once every run's worker is done.
"""

from __future__ import annotations

import dash
from dash import Input, Output, State, dcc, html, no_update

from dash_app import ids
from dash_app.data.run_data import RunData
from dash_app.state.view_state import checked_state
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


def heads_with_layout(data: RunData, method: str) -> int:
    """How many heads of the run have ``method``'s 2D layout in its cache (those the background worker made, those
    a ``qkviz project`` beside it made, those made before): what the progress line and the projection menu say."""
    return data.available().get((method, 2), 0)


def method_options(data: RunData) -> list[dict]:
    """``"t-SNE (72/72 heads, recall 4%)"`` per method offered (some head has its 2D layout, or it is being
    made): how many heads have it, and, when the correlation report covers it, the layout's mean partner
    recall@10 over heads (how faithfully it shows who attends to whom)."""
    options = []
    for method in data.offered_methods():
        recall = data.mean_recall(f"{method}-2d")
        shown = "" if recall is None else f", recall {recall:.0%}"
        making = ", being made" if data.in_background(method) else ""
        options.append({"label": f"{method_label(method)} ({heads_with_layout(data, method)}/{data.n_total_heads} "
                                 f"heads{making}{shown})", "value": method})
    return options


def progress_text(data: RunData) -> list | str:
    """``"attention t-SNE layouts: 23/72 heads · about 3 min left · PCA shown until each lands"``, or ``""``."""
    if data.worker is None:
        return ""
    progress = data.worker.progress()
    name = method_label(progress.method)
    parts = [html.B(f"{name} layouts: {heads_with_layout(data, progress.method)}/{data.n_total_heads} heads")]
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
    """The line and the menu's options, and the stamps: the shell's and those of ``views`` (the names of the app's
    views)."""
    # the menu's options with the line, when they changed: the state callback sends them with the menu's value (a
    # dropdown clears a value its options lack), and this keeps them up with the layouts landing between actions.
    # It runs when the page loads all the same, once the state callback has answered (it takes the state as input)
    @app.callback(Output(ids.LAYOUT_PROGRESS, "children"), Output(ids.METHOD_SELECT, "options", allow_duplicate=True),
                  Output(ids.LAYOUT_POLL, "disabled"), Input(ids.LAYOUT_POLL, "n_intervals"), Input(ids.STATE, "data"),
                  State(ids.METHOD_SELECT, "options"), prevent_initial_call=True)
    def show_progress(_, current, shown_options):
        shown = runs[checked_state(current, runs).run]
        running = any(data.worker is not None and data.worker.progress().running for data in runs)
        options = method_options(shown)
        return progress_text(shown), options if options != shown_options else no_update, not running

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
