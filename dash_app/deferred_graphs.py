"""The graphs of the views that do not show first, put into the page only when their view first shows.

Once plotly.js has loaded, every ``dcc.Graph`` in the page mounts and plots its figure, an empty one in a hidden
view too: about 20 ms of the browser's one thread each, eleven graphs behind the matrix before its picture is done.
So the shell lays out the view a page opens on (:data:`FIRST_VIEW`) whole, and every other view with each of its
graphs replaced by an empty slot (:func:`defer_graphs`, ``display: contents`` so that the graph, once in it, sits
in the view's layout as if the slot were not there). The state callback fills a view's slots the first time the
state shows it (:func:`slot_children`), in the same answer that sends the view its state: Dash mounts the graphs,
then runs the view's drawing callbacks, which find them. Which views a page has mounted is the store
:data:`dash_app.ids.MOUNTED_VIEWS`.

So a callback with a held-back graph among its outputs must not run before its view shows: Dash refuses one whose
output is not in the page, and logs the refusal in the browser's console. It takes no input the page sets before
then: not the page's load (``prevent_initial_call``), not the shell's layout stamp (the view's own copy,
:func:`dash_app.ids.layout_stamp`, written only while it shows), not a poll that runs before the view shows, and
no control whose value the browser may reset (a dropdown clears a value that is not among its options).
"""

from __future__ import annotations

from collections.abc import Iterator

from dash import dcc, html, no_update

from dash_app.state.view_state import ViewState

#: the view a page opens on without a query: laid out whole
FIRST_VIEW = ViewState().view
#: a slot lays out no box of its own: its graph is laid out as its parent's child
SLOT_STYLE = {"display": "contents"}


def slot_id(graph_id: str) -> str:
    """The id of the empty slot that holds graph ``graph_id`` until its view first shows."""
    return f"{graph_id}-slot"


def defer_graphs(layout) -> dict[str, dcc.Graph]:
    """Replace every ``dcc.Graph`` under ``layout`` (a view's container) by its empty slot, in place; give back
    ``{slot id: graph}`` in the layout's order."""
    deferred = {}
    for parent, index, graph in list(_graphs(layout)):
        slot = html.Div(id=slot_id(graph.id), style=SLOT_STYLE, children=[])
        if index is None:
            parent.children = slot
        else:
            parent.children[index] = slot
        deferred[slot.id] = graph
    return deferred


def slot_children(deferred: dict[str, dict[str, dcc.Graph]], view: str, mounted) -> list:
    """The children of every slot, view by view in ``deferred``'s order (``{view: {slot id: graph}}``): the graph
    for the slots of ``view`` when the page has not mounted it (``mounted``: the views it has), no update otherwise."""
    fill = view not in checked_views(mounted)
    return [[graph] if fill and name == view else no_update
            for name, slots in deferred.items() for graph in slots.values()]


def mounted_views(view: str, mounted) -> list[str]:
    """The page's mounted views once ``view`` shows."""
    mounted = checked_views(mounted)
    return mounted if view in mounted else [*mounted, view]


def checked_views(mounted) -> list[str]:
    """The store's views as the page sent them: a list of names, anything else none (a value a request made up
    only mounts a view's graphs again)."""
    return [name for name in mounted if isinstance(name, str)] if isinstance(mounted, list) else []


def _graphs(component) -> Iterator[tuple[object, int | None, dcc.Graph]]:
    """``(parent, index in its children or None for a single child, graph)`` of every ``dcc.Graph`` under
    ``component``, in the layout's order (a parent's children made a list, so that one can be replaced)."""
    children = getattr(component, "children", None)
    if isinstance(children, tuple):
        component.children = children = list(children)
    items = enumerate(children) if isinstance(children, list) else [(None, children)]
    for index, child in list(items):
        if isinstance(child, dcc.Graph):
            yield component, index, child
        elif hasattr(child, "children"):
            yield from _graphs(child)
