"""The URL query string <-> :class:`~dash_app.state.view_state.ViewState`, validated.

``?run=minilm&view=single&layer=2&head=5&method=tsne&dim=2&colour=position&search=the`` restores
a view (``&weighting=value``: the views that draw attention weights draw them value-weighted). Every
parameter is checked against the runs given at start: a run is named by its name or
its index among them (never by a path), numbers must be in range, choices must be known. What
does not pass falls back to its default and yields a notice for the page, never an error page. The views
(``view=``) are the registered ones (:mod:`dash_app.state.view_registry`), and the one shown adds the fields it
declares (``url_fields``: the sentence view's sentence).
"""

from __future__ import annotations

import math
from dataclasses import replace
from urllib.parse import parse_qs, urlencode

import dash_app.views  # noqa: F401  (each view registers itself)
from dash_app.data.run_data import RunShape
from dash_app.state.view_state import FILTER_MODES, MAX_BOUND, SORTS, ViewState, initial_state, pairs_with
from dash_app.state.view_registry import get_view, view_names
from qkviz.analysis import LABELS
from qkviz.report import COLOURS
from qkviz.projection import method_names
from qkviz.store import DIMENSIONS, WEIGHTINGS

MAX_SEARCH_LENGTH = 100
MATCH_MODES = {"whole": False, "substring": True}
PARAMS = ("run", "view", "layer", "head", "method", "dim", "colour", "search", "match", "sort", "filter", "filter_min",
          "filter_max", "filter_labels", "filter_mode", "sentence", "weighting", "point", "pair")
#: the URL's names of the matrix filter's state fields
FILTER_PARAMS = {"filter": "filter_by", "filter_min": "filter_min", "filter_max": "filter_max",
                 "filter_labels": "filter_labels", "filter_mode": "filter_mode"}


#: the URL's name of the why panel's pair (the point clicked before ``point``)
PAIR_PARAMS = {"pair": "pair_point"}


#: the longest query string read (a shared link is a few hundred characters)
MAX_QUERY = 4096


def parse_url(search: str | None, shapes: list[RunShape]) -> tuple[ViewState, list[str]]:
    """The state a query string asks for, and one notice per parameter that was ignored."""
    query = parse_qs((search if isinstance(search, str) else "")[:MAX_QUERY].lstrip("?"), keep_blank_values=True)
    notices = [f"Ignored the unknown URL parameter '{name}'." for name in query if name not in PARAMS]
    values = {name: query[name][0] for name in PARAMS if name in query}
    notices += [f"URL parameter '{name}' was given {len(query[name])} times; used the first."
                for name in PARAMS if len(query.get(name, ())) > 1]
    run, notice = _parse_run(values.get("run"), shapes)
    notices += notice
    shape = shapes[run]
    state = initial_state(shape, run)
    parsers = {
        "view": lambda text: _choice(text, view_names()),
        "layer": lambda text: _integer(text, shape.n_layers),
        "head": lambda text: _integer(text, shape.n_heads),
        "method": lambda text: _choice(text, method_names()),
        "dim": lambda text: _integer(text, max(DIMENSIONS) + 1, min(DIMENSIONS)),
        "colour": lambda text: _choice(text, tuple(COLOURS)),
        "search": lambda text: text[:MAX_SEARCH_LENGTH],
        "match": lambda text: MATCH_MODES.get(text),
        "sort": lambda text: _choice(text, SORTS + shape.atlas_sorts),
        "filter": lambda text: _choice(text, shape.atlas_sorts),
        "filter_min": _number,
        "filter_max": _number,
        "filter_labels": lambda text: _labels(text),
        "filter_mode": lambda text: _choice(text, FILTER_MODES),
        "sentence": lambda text: _integer(text, shape.n_sentences),
        "weighting": lambda text: _choice(text, WEIGHTINGS),
        "point": lambda text: _integer(text, 2 * shape.n_tokens),
        "pair": lambda text: _integer(text, 2 * shape.n_tokens),
    }
    changes = {}
    for name, parse in parsers.items():
        if name not in values:
            continue
        parsed = parse(values[name])
        if parsed is None:
            notices.append(f"URL parameter {name}={values[name][:40]!r} is not valid for run "
                           f"'{shape.name}'; showing the default.")
            continue
        changes["substring" if name == "match" else PAIR_PARAMS.get(name, FILTER_PARAMS.get(name, name))] = parsed
    if len(values.get("search", "")) > MAX_SEARCH_LENGTH:
        notices.append(f"The search was cut to {MAX_SEARCH_LENGTH} characters.")
    state = replace(state, **changes)
    if state.pair_point is not None and not pairs_with(state.point, state.pair_point, shape.n_tokens):
        notices.append("URL parameter pair= names no query or key pairing with point=; showing no pair.")
        state = replace(state, pair_point=None)
    return state, notices


def to_url(state: ViewState, shapes: list[RunShape]) -> str:
    """``?run=...&view=...``: every parameter that restores ``state`` (search and selection only when set)."""
    params = {"run": shapes[state.run].name, "view": state.view, "layer": state.layer, "head": state.head,
              "method": state.method, "dim": state.dim, "colour": state.colour}
    if state.search:
        params["search"] = state.search
        params["match"] = "substring" if state.substring else "whole"
    if state.sort != "order":
        params["sort"] = state.sort
    if state.weighting != ViewState.weighting:
        params["weighting"] = state.weighting
    if state.filter_by:
        params["filter"] = state.filter_by
        params.update({name: getattr(state, field) for name, field in FILTER_PARAMS.items()
                       if name in ("filter_min", "filter_max") and getattr(state, field) is not None})
        if state.filter_labels:
            params["filter_labels"] = ",".join(state.filter_labels)
        if state.filter_mode != ViewState.filter_mode:
            params["filter_mode"] = state.filter_mode
    shown = set(get_view(state.view).url_fields) if state.view in view_names() else set()
    if state.point is not None:
        shown |= {"sentence", "point"}          # a clicked point is named with its sentence, whatever the view
    params.update({name: getattr(state, name) for name in PARAMS if name in shown and name not in params})
    if state.point is not None and state.pair_point is not None:
        params["pair"] = state.pair_point
    return "?" + urlencode(params)


def _parse_run(text: str | None, shapes: list[RunShape]) -> tuple[int, list[str]]:
    if text is None:
        return 0, []
    names = [shape.name for shape in shapes]
    if text in names:
        return names.index(text), []
    index = _integer(text, len(shapes))
    if index is not None:
        return index, []
    return 0, [f"There is no run {text[:40]!r} here (runs: {', '.join(names)}); showing '{names[0]}'."]


def _integer(text: str, stop: int, start: int = 0) -> int | None:
    """``int(text)`` when it is a plain decimal number in ``[start, stop)``, else None."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 9:
        return None
    value = int(text)
    return value if start <= value < stop else None


def _number(text: str) -> float | None:
    """A filter's bound: a finite decimal number of at most 24 characters, else None."""
    try:
        value = float(text) if len(text) <= 24 else math.nan
    except ValueError:
        return None
    return value if math.isfinite(value) and abs(value) <= MAX_BOUND else None


def _labels(text: str) -> tuple[str, ...] | None:
    """Comma-separated pattern labels, all known (in the rules' order), else None."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    return tuple(label for label in LABELS if label in names) if names and set(names) <= set(LABELS) else None


def _choice(text: str, choices: tuple[str, ...]) -> str | None:
    return text if text in choices else None
