"""Every component id of the app, in one place (the first six are stable, for tests and users).

A view's container, its state store and its layout stamp are named after the view (:mod:`dash_app.state.view_registry`):
:func:`view_container`, :func:`view_state` and :func:`layout_stamp`.
"""


def view_container(view: str) -> str:
    """The id of ``view``'s container, shown only while the state shows it (``matrix-view``)."""
    return f"{view}-view"


def view_state(view: str) -> str:
    """The id of ``view``'s state store: the state again, written only while its view shows. A view's callbacks take
    it as input, so that an action in one view runs no callback of the hidden ones (Dash holds a callback back
    while any callback whose outputs may lead to its inputs is pending: each hidden view's no-op delayed a head
    switch's figure by about 0.2 s)."""
    return f"{view}-view-state"


def layout_stamp(view: str) -> str:
    """The id of ``view``'s layout stamp: the count of layouts landed in the background again, written only while its
    view shows, as its state store is. A view that redraws when a head's layout lands takes it as input, so that a
    landing runs no callback of a hidden view, nor of one whose graphs the page does not hold yet (Dash refuses a
    callback whose output is not in the page, and logs it: :mod:`dash_app.deferred_graphs`)."""
    return f"{view}-layout-stamp"


MATRIX_VIEW = view_container("matrix")
SINGLE_VIEW = view_container("single")
SENTENCE_VIEW = view_container("sentence")
POSITIONS_VIEW = view_container("positions")
SEARCH_INPUT = "search-input"
SEARCH_COUNT = "search-count"

# shell
URL = "url"
STATE = "view-state"
NOTICE = "notice"
RUN_SELECT = "run-select"
VIEW_TABS = "view-tabs"
METHOD_SELECT = "method-select"
DIM_SELECT = "dim-select"
COLOUR_SELECT = "colour-select"
SEARCH_SUBSTRING = "search-substring"
RUN_INFO = "run-info"
#: the views whose graphs the page holds (dash_app.deferred_graphs)
MOUNTED_VIEWS = "mounted-views"
#: background layouts (qkviz serve): the top bar's progress line, its poll, and the count of heads landed (each view
#: reads its own copy, :func:`layout_stamp`)
LAYOUT_PROGRESS = "layout-progress"
LAYOUT_POLL = "layout-poll"
LAYOUT_STAMP = "layout-stamp"

# {curve, customdata, timestamp} of the last click / hover on a graph (relayed by pointEvent, see dash_app.state.events)
MATRIX_CLICK = "matrix-click"
SINGLE_CLICK = "single-click"
SINGLE_HOVER_POINT = "single-hover-point"
SENTENCE_CLICK = "sentence-click"
POSITIONS_CLICK = "positions-click"
#: {layer, head, sentence, point, timestamp} of the last exemplar clicked in the single view's atlas panel
EXEMPLAR_CLICK = "exemplar-click"

# matrix view
MATRIX_GRAPH = "matrix-graph"
MATRIX_SORT = "matrix-sort"
MATRIX_MESSAGE = "matrix-message"
MATRIX_RENDERED = "matrix-rendered"
#: the matrix's filter: the atlas column, the range its value must lie in, the labels kept, dim or hide the rest
MATRIX_FILTER = "matrix-filter"
MATRIX_FILTER_MIN = "matrix-filter-min"
MATRIX_FILTER_MAX = "matrix-filter-max"
MATRIX_FILTER_LABELS = "matrix-filter-labels"
MATRIX_FILTER_MODE = "matrix-filter-mode"
#: {width, height} of the browser's window (written by matrixViewport), the matrix's grid is fitted to it
MATRIX_VIEWPORT = "matrix-viewport"

# single-head view
SINGLE_GRAPH = "single-graph"
SINGLE_INFO = "single-info"
SINGLE_MESSAGE = "single-message"
SINGLE_HOVER = "single-hover"          # the line naming the point under the mouse (under SINGLE_POINT)
SINGLE_CORRELATION = "single-correlation"
SINGLE_OPTIONS = "single-options"
SINGLE_RENDERED = "single-rendered"
LAYER_SELECT = "layer-select"
HEAD_SELECT = "head-select"
PREV_HEAD = "prev-head"
NEXT_HEAD = "next-head"
LAYER_UP = "layer-up"
LAYER_DOWN = "layer-down"
TOP_K = "top-k"
THRESHOLD = "threshold"
OPEN_SENTENCE = "open-sentence"
SINGLE_ATLAS = "single-atlas"
#: pattern-matching id type of an exemplar button: {"type": EXEMPLAR, "layer", "head", "sentence", "point"}
EXEMPLAR = "exemplar"

# sentence view
SENTENCE_SELECT = "sentence-select"
SENTENCE_OPTIONS = "sentence-options"
#: each view's attention / value-weighted switch (the state's ``weighting``)
SENTENCE_WEIGHTING = "sentence-weighting"
SINGLE_WEIGHTING = "single-weighting"
DOCUMENT_WEIGHTING = "document-weighting"
SENTENCE_GRAPH = "sentence-graph"
SENTENCE_MESSAGE = "sentence-message"
AGGREGATE_GRAPH = "aggregate-graph"
SENTENCE_HOVER_SINK = "sentence-hover-sink"

# positions view
POSITIONS_GRAPH = "positions-graph"
POSITIONS_MESSAGE = "positions-message"
POSITIONS_RENDERED = "positions-rendered"

# corpus partners (single view)
PARTNER_K = "partner-k"
PARTNER_OPTIONS = "partner-options"
SINGLE_PARTNERS = "single-partners"
#: pattern-matching id type of a partner button: {"type": PARTNER, "point"}
PARTNER = "partner"
#: {point, timestamp} of the last partner button clicked
PARTNER_CLICK = "partner-click"

# related heads (qkviz related): the single view's list and the heads map view
HEADS_VIEW = view_container("heads")
HEADS_GRAPH = "heads-graph"
HEADS_MESSAGE = "heads-message"
HEADS_COLOUR = "heads-colour"
HEADS_RENDERED = "heads-rendered"
#: {curve, customdata: flat head, timestamp} of the last click on the heads map
HEADS_CLICK = "heads-click"
SINGLE_RELATED = "single-related"
#: pattern-matching id type of a related-head button: {"type": RELATED_HEAD, "layer", "head", "by"}
RELATED_HEAD = "related-head"
#: {layer, head, timestamp} of the last related-head button clicked
RELATED_CLICK = "related-click"

# lasso / box selection in the single view (dash_app.panels.selection)
#: {curves, points, timestamp} of the last selection on the single graph (relayed by selectionEvent)
SINGLE_SELECTION = "single-selection"
#: {run, layer, head, count} of the selection the table shows (None: no table)
SELECTION_SHOWN = "selection-shown"
SELECTION_TABLE = "selection-table"
SELECTION_CSV_BUTTON = "selection-csv-button"
SELECTION_DOWNLOAD = "selection-download"

# compare view (dash_app.views.compare): the same head of two runs over the same tokens
COMPARE_VIEW = view_container("compare")
COMPARE_RUN_A = "compare-run-a"
COMPARE_RUN_B = "compare-run-b"
COMPARE_LAYER = "compare-layer"
COMPARE_HEAD = "compare-head"
COMPARE_STATUS = "compare-status"
COMPARE_POLL = "compare-poll"
COMPARE_HEATMAP = "compare-heatmap"
COMPARE_TABLE = "compare-table"
COMPARE_GRAPH_A = "compare-graph-a"
COMPARE_GRAPH_B = "compare-graph-b"
COMPARE_LINK_SINK = "compare-link-sink"

# views, fixed (issue 17)
#: the single view's Clicked point panel (the state's point), and its line naming the point under the mouse
SINGLE_POINT = "single-point"
#: written by the single view's labelsOnZoom (token labels only when zoomed in); read by nothing
SINGLE_LABELS_SINK = "single-labels-sink"
#: the sentence view's own layer and head selectors (the state's layer and head, as the single view's)
SENTENCE_LAYER = "sentence-layer"
SENTENCE_HEAD = "sentence-head"
#: the matrix view's colour control (the state's colour, as the single view's)
MATRIX_COLOUR = "matrix-colour"
#: pattern-matching id type of an export button: {"type": EXPORT, "graph", "format", "name"}
EXPORT = "export"
#: {graph, format, timestamp} of the last export (written by exportFigure)
EXPORT_SINK = "export-sink"

# document view (dash_app.views.document): one head's attention over a long document
DOCUMENT_VIEW = view_container("document")
DOCUMENT_SELECT = "document-select"
DOCUMENT_LAYER = "document-layer"
DOCUMENT_HEAD = "document-head"
#: how a pixel pools its query-key cells: "max" or "mean"
DOCUMENT_POOL = "document-pool"
DOCUMENT_GRAPH = "document-graph"
DOCUMENT_MESSAGE = "document-message"
#: the tokens of the region on screen (keys, then queries), redrawn with each zoom
DOCUMENT_STRIP = "document-strip"
DOCUMENT_PROFILE = "document-profile"
DOCUMENT_SCORES = "document-scores"
#: {key: [run, document, layer, head, pool], rows: [start, stop], columns: [start, stop]} of the map drawn
DOCUMENT_REGION = "document-region"
#: a cell of the document view's map clicked: {row, column, timestamp} (query and key positions in the document)
DOCUMENT_CLICK = "document-click"


# the why panel (dash_app.panels.why), placed in the single, sentence and document views
class WhyIds:
    """The why panel's ids in one view: its body, its poll while the explanation is computed, the subject shown."""

    def __init__(self, view: str):
        self.panel = f"{view}-why"
        self.poll = f"{view}-why-poll"
        self.shown = f"{view}-why-shown"


def why_ids(view: str) -> WhyIds:
    return WhyIds(view)


#: the page's session id (dash_app.explain_worker.new_session, made for each page load): the model work's queue
#: is kept per page
PAGE_SESSION = "page-session"


# the ablate action in the single view (dash_app.panels.ablation)
ABLATE_MODE = "ablate-mode"
ABLATE_BUTTON = "ablate-button"
ABLATE_POLL = "ablate-poll"
#: the subject shown: {run, layer, head, mode}
ABLATE_SHOWN = "ablate-shown"
ABLATE_PANEL = "ablate-panel"
#: the line saying ablation is off on this server (qkviz serve --no-model)
ABLATE_OFF = "ablate-off"


# composition view (dash_app.views.composition): heads as nodes, Q-, K- and V-composition edges from stored circuits
COMPOSITION_VIEW = view_container("composition")
COMPOSITION_GRAPH = "composition-graph"
COMPOSITION_MESSAGE = "composition-message"
COMPOSITION_SIDE = "composition-side"
COMPOSITION_BY = "composition-by"
COMPOSITION_MINIMUM = "composition-minimum"
COMPOSITION_VALUE_MINIMUM = "composition-value-minimum"
COMPOSITION_TOP = "composition-top"
COMPOSITION_LAYERS = "composition-layers"
COMPOSITION_HEAD = "composition-head"
#: the composition view's level (layer x layer matrix, heads, auto) and its layer matrix's graph
COMPOSITION_LEVEL = "composition-level"
COMPOSITION_LAYER_GRAPH = "composition-layer-graph"
#: {curve, customdata: flat head, timestamp} of the last click on a node
COMPOSITION_CLICK = "composition-click"
