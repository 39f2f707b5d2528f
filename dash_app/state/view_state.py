"""The view state -- what the URL holds -- and the pure transitions user actions make on it.

A :class:`ViewState` is kept in a ``dcc.Store`` as a plain dict and mirrored in the URL by
:mod:`dash_app.url_state`. Every transition takes the state and the run's shape and returns a new
state; none touches Dash, so each is tested directly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from qkviz.analysis import LABELS
from qkviz.report import COLOURS
from dash_app.data.run_data import RunShape
from dash_app.state.view_registry import view_names
from qkviz.projection import FIRST_METHOD, method_names
from qkviz.store import DIMENSIONS, WEIGHTINGS

#: matrix-view orders: model order, by the report's distance-dot correlation, by search clusters, by the
#: clustering of ``qkviz related``; a run with a head atlas adds its columns (``RunShape.atlas_sorts``)
SORTS = ("order", "correlation", "clusters", "related")
#: the longest search the server takes (the input box stops at 100 characters)
MAX_SEARCH = 100
#: what the matrix does with the heads a filter leaves out: draws them faded, or leaves them out of the grid
FILTER_MODES = ("dim", "hide")
#: the largest magnitude a filter's bound takes (a statistic's values are far inside it)
MAX_BOUND = 1e12


@dataclass(frozen=True)
class ViewState:
    """Everything a view needs to be redrawn: ``view`` is a registered view's name (:mod:`dash_app.state.view_registry`),
    ``point`` an index into a head's joint layout (``token`` for a query, ``n_tokens + token`` for a key), or None
    when nothing is clicked."""

    run: int = 0
    view: str = "matrix"
    layer: int = 0
    head: int = 0
    method: str = FIRST_METHOD
    dim: int = 2
    colour: str = "type"
    search: str = ""
    substring: bool = False
    sort: str = "order"
    #: the matrix's filter: a head-atlas column (``label`` or a numeric one; "" for none), the range its value
    #: must lie in (None: open), the labels kept (for ``label``; none: all), and what happens to the others
    filter_by: str = ""
    filter_min: float | None = None
    filter_max: float | None = None
    filter_labels: tuple[str, ...] = ()
    filter_mode: str = "dim"
    sentence: int = 0
    #: what the views that draw attention weights draw: ``"attention"`` (a_ij) or ``"value"`` (a_ij |W_O^h v_j|, as
    #: each query's share); one of :data:`qkviz.store.WEIGHTINGS`
    weighting: str = "attention"
    point: int | None = None
    #: the point clicked before ``point``, of the other kind (its query for a key, its key for a query): with
    #: ``point`` the pair the why panel explains (:mod:`dash_app.panels.why`); None without one
    pair_point: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "ViewState":
        names = {field.name for field in fields(cls)}
        return cls(**{key: value for key, value in (data or {}).items() if key in names})


def _index(value, count: int) -> bool:
    """Whether ``value`` is an int (not a bool) in ``[0, count)``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < count


def _bound(value) -> bool:
    """Whether ``value`` is None or a finite number (not a bool) within :data:`MAX_BOUND`."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= MAX_BOUND)


def _labels(value) -> tuple[str, ...] | None:
    """A filter's labels as the state keeps them: the known labels in ``value`` (a list or tuple of strings), in
    the rules' order; None when ``value`` is anything else."""
    if not isinstance(value, (list, tuple)) or len(value) > 4 * len(LABELS) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(label for label in LABELS if label in value)


def validate(state: ViewState, shape: RunShape, defaults: ViewState) -> ViewState:
    """``state`` with every field that does not fit ``shape`` (or a known choice) set from ``defaults``."""
    labels = _labels(state.filter_labels)
    if labels is not None and labels != state.filter_labels:
        state = replace(state, filter_labels=labels)
    checks = {
        "view": isinstance(state.view, str) and state.view in view_names(),
        "layer": _index(state.layer, shape.n_layers),
        "head": _index(state.head, shape.n_heads),
        "method": isinstance(state.method, str) and state.method in method_names()
                  and (shape.layouts is None or (state.method, 2) in shape.layouts),
        "dim": _index(state.dim, 4) and state.dim in DIMENSIONS and (shape.layouts is None or (state.method, state.dim) in shape.layouts),
        "colour": isinstance(state.colour, str) and state.colour in (shape.colours or COLOURS),
        "search": isinstance(state.search, str) and len(state.search) <= MAX_SEARCH,
        "substring": isinstance(state.substring, bool),
        "sort": isinstance(state.sort, str) and (state.sort in SORTS or state.sort in shape.atlas_sorts),
        "filter_by": isinstance(state.filter_by, str) and (state.filter_by == "" or state.filter_by in shape.atlas_sorts),
        "filter_min": _bound(state.filter_min),
        "filter_max": _bound(state.filter_max),
        "filter_labels": labels is not None,
        "filter_mode": isinstance(state.filter_mode, str) and state.filter_mode in FILTER_MODES,
        "sentence": _index(state.sentence, shape.n_sentences),
        "weighting": isinstance(state.weighting, str) and state.weighting in WEIGHTINGS,
        "point": state.point is None or _index(state.point, 2 * shape.n_tokens),
        "pair_point": state.pair_point is None or pairs_with(state.point, state.pair_point, shape.n_tokens),
    }
    return replace(state, **{name: getattr(defaults, name) for name, ok in checks.items() if not ok})


def pairs_with(point, other, n_tokens: int) -> bool:
    """Whether ``other`` is a point of the joint layout of the other kind than ``point`` (a key for a query, a
    query for a key), both in range."""
    return (_index(point, 2 * n_tokens) and _index(other, 2 * n_tokens)
            and (point < n_tokens) != (other < n_tokens))


def checked_state(current, runs: list) -> ViewState:
    """The view state a callback received, validated on the server against its run (``runs``: the app's
    :class:`~dash_app.data.run_data.RunData`): whatever a forged request holds -- another type, an index out of
    range, a search of megabytes -- becomes the nearest valid state, never an error."""
    fields_given = current if isinstance(current, dict) else {}
    try:
        state = ViewState.from_dict(fields_given)
    except TypeError:
        state = ViewState()
    run = state.run if _index(state.run, len(runs)) else 0
    shape = runs[run].shape
    if isinstance(state.search, str) and len(state.search) > MAX_SEARCH:
        state = replace(state, search=state.search[:MAX_SEARCH])
    return validate(replace(state, run=run), shape, ViewState(run=run, method=shape.default_method))


def initial_state(shape: RunShape, run: int = 0) -> ViewState:
    return ViewState(run=run, method=shape.default_method)


def select_run(state: ViewState, run: int, shape: RunShape) -> ViewState:
    """Another run: keep the view, projection, colour and search; start at its first head."""
    return replace(state, run=run, layer=0, head=0, sentence=0, point=None, pair_point=None,
                   method=shape.default_method)


def flat_head(state: ViewState, shape: RunShape) -> int:
    return state.layer * shape.n_heads + state.head


def open_head(state: ViewState, flat: int, shape: RunShape) -> ViewState:
    """The single view of head ``flat`` (``layer * n_heads + head``), e.g. from a matrix click."""
    if not 0 <= flat < shape.n_layers * shape.n_heads:
        return state
    return replace(state, view="single", layer=flat // shape.n_heads, head=flat % shape.n_heads)


def step_head(state: ViewState, delta: int, shape: RunShape) -> ViewState:
    """Previous / next head in model order, continuing into the adjacent layer (wrapping at the ends)."""
    total = shape.n_layers * shape.n_heads
    flat = (flat_head(state, shape) + delta) % total
    return replace(state, layer=flat // shape.n_heads, head=flat % shape.n_heads)


def step_layer(state: ViewState, delta: int, shape: RunShape) -> ViewState:
    """The same head one layer up (``delta`` -1) or down (+1), stopping at the first and last layer."""
    return replace(state, layer=min(max(state.layer + delta, 0), shape.n_layers - 1))


def select_point(state: ViewState, point: int, sentence: int, shape: RunShape) -> ViewState:
    """A clicked query or key: it and its sentence become the selection (for the sentence view too). It pairs with
    the point clicked before when that is of the other kind (a query, then one of its keys), else keeps the pair's
    other end (a query's keys clicked one after another each pair with it)."""
    if not 0 <= point < 2 * shape.n_tokens:
        return state
    pair_point = next((other for other in (state.point, state.pair_point)
                       if other is not None and pairs_with(point, other, shape.n_tokens)), None)
    return replace(state, point=point, sentence=sentence, pair_point=pair_point)


def select_pair(state: ViewState, query: int, key: int, shape: RunShape) -> ViewState:
    """Token ``query``'s query and token ``key``'s key, of one sentence, as the clicked point and its pair (a
    cell of the document view's map)."""
    n = shape.n_tokens
    if not (0 <= query < n and 0 <= key < n):
        return state
    return replace(state, point=query, pair_point=n + key)


def select_sentence(state: ViewState, sentence: int, shape: RunShape) -> ViewState:
    """Another sentence: the clicked point is dropped unless it belongs to it (checked by the caller)."""
    if not 0 <= sentence < shape.n_sentences:
        return state
    return replace(state, sentence=sentence, point=None, pair_point=None) if sentence != state.sentence else state


def open_exemplar(state: ViewState, layer: int, head: int, sentence: int, point: int, shape: RunShape) -> ViewState:
    """The sentence view of an atlas exemplar: its head, its sentence, its query token (``point``) clicked."""
    valid = (0 <= layer < shape.n_layers and 0 <= head < shape.n_heads and 0 <= sentence < shape.n_sentences
             and 0 <= point < shape.n_tokens)
    if not valid:
        return state
    return replace(state, view="sentence", layer=layer, head=head, sentence=sentence, point=point, pair_point=None)


def bounded_number(value, default: float, low: float, high: float, whole: bool = False) -> float:
    """A control's number as the server takes it: ``default`` for anything not a finite number, else clipped
    to ``[low, high]`` (and rounded when ``whole``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        return default
    value = min(max(value, low), high)
    return int(round(value)) if whole else float(value)


def string_list(value, limit: int = 16) -> list[str]:
    """A checklist's value as the server takes it: its strings (at most ``limit``); anything else is empty."""
    return [item for item in value[:limit] if isinstance(item, str)] if isinstance(value, list) else []
