"""The app's views, each registered once by its own module; the shell is derived from this registry.

As Dash's ``register_page`` does for pages, every module of :mod:`dash_app.views` that is a view ends with

    VIEW = register_view(View(name="heads", label="Heads", order=50, layout=layout, register=register, ...))

and the app keeps its one page of tabs, built from what the views declared (:func:`registered_views`, in
``order``): the tabs (:attr:`View.label`, offered when :attr:`View.offered` says so), the views' containers in
the page (:attr:`View.layout`) and which one shows, their callbacks (:attr:`View.register`), the stores the
shell holds for them (:attr:`View.stores`, :attr:`View.point_events`, the state written only while the view
shows), the relays of their graphs' clicks, the inputs of the one state callback and the transition each makes
(:attr:`View.actions`), the controls that set a state field and their options (:attr:`View.controls`,
:attr:`View.repeats`, :attr:`View.options`), the ``view=`` values the URL and the state accept, and which
fields the URL carries while the view shows (:attr:`View.url_fields`). A view's component ids are in
:mod:`dash_app.ids`; its container is ``<name>-view``, its state store ``<name>-view-state`` and
its copy of the layout stamp ``<name>-layout-stamp`` (:func:`dash_app.ids.view_container`,
:func:`dash_app.ids.view_state`, :func:`dash_app.ids.layout_stamp`).

:mod:`dash_app.views` imports every module in it, so that each registers itself; this module imports no view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import dash

from dash_app import ids
from dash_app.data.attention_changes import AttentionChanges
from dash_app.explain_worker import ExplainWorker
from dash_app.data.run_data import RunData
from dash_app.data.token_search import TokenSearch

#: a view's action on the state: ``transition(state, value, data, shape) -> state``, given the state (a
#: :class:`~dash_app.state.view_state.ViewState`), the new value of the component that changed (a store's event, a
#: button's clicks, a control's value), the run shown (:class:`~dash_app.data.run_data.RunData`) and its shape
Transition = Callable
#: a control's options as the state callback sends them: ``options(data, state, previous)`` -> the options, or
#: ``dash.no_update`` to leave them (``previous`` is the state before the action, None on first load)
ControlOptions = Callable


@dataclass(frozen=True)
class AppContext:
    """What views are built over: the runs served, each run's token search, the runs' attention changes, and the
    worker that explains pairs off the request thread (the why panel's)."""

    runs: list[RunData]
    searches: list[TokenSearch]
    changes: AttentionChanges
    explanations: ExplainWorker = field(default_factory=ExplainWorker)


def always(_context: AppContext) -> bool:
    return True


@dataclass(frozen=True)
class View:
    """One view of the app, as its module declares it.

    ``name`` is the state's ``view`` (the tab's value and the URL's ``view=``), ``label`` the tab's text and
    ``order`` its place among the tabs. ``layout(context)`` is the view's container (id :attr:`container`,
    hidden unless the state shows it), ``register(app, context)`` adds its callbacks, which read the state
    from :attr:`state_store` (and, to redraw as layouts land in the background, :attr:`layout_stamp`).
    ``offered(context)``: whether its tab is shown (the container is always in the page, so that a URL naming
    the view still finds it). ``point_events``: ``{store: (graph, event)}`` relayed by ``pointEvent`` (the
    shell holds the stores); ``stores``: the other stores the shell holds for it (its last drawn key, events
    its own relays write). ``actions``: ``{(component, property): transition}``, inputs
    of the state callback. ``controls``: ``{control: field}``, controls whose value is a state field as is;
    ``repeats``: the same for a control that repeats a field another view's control sets, read instead of it
    while this view shows. ``options``: ``{control: options}`` sent by the state callback. ``url_fields``:
    state fields the URL carries while the view shows (those of every view are the shell's). ``opened_layout``: the
    container a page that opens on the view gets instead of :attr:`layout`, where the two differ (the matrix's first
    drawing, which a page opening on another view would only load and plot hidden); None: :attr:`layout`."""

    name: str
    label: str
    order: int
    layout: Callable[[AppContext], object]
    register: Callable[[dash.Dash, AppContext], None]
    offered: Callable[[AppContext], bool] = always
    point_events: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    stores: tuple[str, ...] = ()
    actions: Mapping[tuple[str, str], Transition] = field(default_factory=dict)
    controls: Mapping[str, str] = field(default_factory=dict)
    repeats: Mapping[str, str] = field(default_factory=dict)
    options: Mapping[str, ControlOptions] = field(default_factory=dict)
    url_fields: tuple[str, ...] = ()
    opened_layout: Callable[[AppContext], object] | None = None

    @property
    def container(self) -> str:
        return ids.view_container(self.name)

    @property
    def state_store(self) -> str:
        return ids.view_state(self.name)

    @property
    def layout_stamp(self) -> str:
        return ids.layout_stamp(self.name)


_VIEWS: dict[str, View] = {}


def register_view(view: View) -> View:
    """Add ``view`` to the registry (once per name) and give it back, for its module to keep as ``VIEW``."""
    if view.name in _VIEWS and _VIEWS[view.name] is not view:
        raise ValueError(f"two views are named {view.name!r}")
    _VIEWS[view.name] = view
    return view


def registered_views() -> tuple[View, ...]:
    """Every registered view, in tab order."""
    return tuple(sorted(_VIEWS.values(), key=lambda view: (view.order, view.name)))


def view_names() -> tuple[str, ...]:
    """The names of the registered views (the values ``ViewState.view`` and the URL's ``view=`` take)."""
    return tuple(view.name for view in registered_views())


def get_view(name: str) -> View:
    return _VIEWS[name]
