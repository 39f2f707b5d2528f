/* The app's clientside callbacks (registered through dash_app/state/events.py).
 *
 * Browser events are relayed into the dcc.Stores the state callback reads; the sentence view's hover
 * restyles its lines in place. Each is a function of window.dash_clientside.qkviz, used through
 * ClientsideFunction(namespace="qkviz", function_name=...). Points are identified by their trace's
 * customdata, never by coordinates.
 */
window.dash_clientside = window.dash_clientside || {};

(function () {
    /* The Plotly graph inside the dcc.Graph whose id is graphId (null before it is drawn). */
    function plotlyGraph(graphId) {
        const container = document.getElementById(graphId);
        return container ? container.querySelector('.js-plotly-plot') : null;
    }

    /* A click on a pattern-matching button -> {field: id[field], ..., timestamp} with the given fields of
     * the button's id; a button being drawn (no clicks yet) is no click. */
    function buttonClick(fields) {
        const context = window.dash_clientside.callback_context;
        const target = context.triggered_id;
        const value = context.triggered.length ? context.triggered[0].value : null;
        if (!target || typeof target !== 'object' || !value) { return window.dash_clientside.no_update; }
        const event = {};
        fields.forEach(function (field) { event[field] = target[field]; });
        event.timestamp = Date.now();
        return event;
    }

    window.dash_clientside.qkviz = Object.assign(window.dash_clientside.qkviz || {}, {
        /* Plotly click / hover data -> {curve, customdata, timestamp}. Figures send customdata as a typed
         * array, which dcc.Graph leaves out of its event data, so it is read from the plotted traces
         * instead (null when absent). */
        pointEvent: function (event, graphId) {
            if (!event || !event.points || !event.points.length) { return null; }
            const point = event.points[0];
            const graph = plotlyGraph(graphId);
            const trace = graph && graph._fullData && graph._fullData[point.curveNumber];
            if (!trace || trace.customdata === undefined || trace.customdata === null) { return null; }
            let value = trace.customdata[point.pointNumber];
            if (trace.type === 'heatmap') {
                /* dcc.Graph drops a heatmap point's [row, column]: the cell is found from its x and y */
                const row = Array.from(trace.y).indexOf(point.y), column = Array.from(trace.x).indexOf(point.x);
                value = row >= 0 && column >= 0 ? trace.customdata[row][column] : null;
            }
            if (value === undefined || value === null) { return null; }
            return {curve: point.curveNumber, customdata: Number(value), timestamp: event.timestamp || Date.now()};
        },

        /* A heatmap click -> {curve, customdata: row index, timestamp} (the shape of pointEvent's). dcc.Graph
         * drops a heatmap point's [row, column] index from its event data, so the row is found from the
         * clicked row's name (unique, such as "L1 H2") among the trace's rows. */
        heatmapRowEvent: function (event, graphId) {
            if (!event || !event.points || !event.points.length) { return null; }
            const point = event.points[0];
            const graph = plotlyGraph(graphId);
            const trace = graph && graph._fullData && graph._fullData[point.curveNumber];
            const row = trace && trace.y ? Array.from(trace.y).indexOf(point.y) : -1;
            if (row < 0) { return null; }
            return {curve: point.curveNumber, customdata: row, timestamp: Date.now()};
        },

        /* A click on the document view's map (an image trace) -> {row, column, timestamp}: the query (row) and
         * key (column) positions of the cell under the mouse, read from the click's data coordinates (each
         * token's cell is centred on its index). The server checks them against the document. */
        cellEvent: function (event) {
            if (!event || !event.points || !event.points.length) { return null; }
            const point = event.points[0];
            if (typeof point.x !== 'number' || typeof point.y !== 'number') { return null; }
            return {row: Math.round(point.y), column: Math.round(point.x), timestamp: Date.now()};
        },

        /* The window's size -> {width, height} for the matrix's grid (dash_app/views/matrix/grid.py), when the
         * matrix's state changes and, a quarter of a second after the window stops being resized, by itself
         * (set_props on the store whose id is storeId); no_update while the size is the one already sent. */
        matrixViewport: function (_state, storeId, current) {
            const size = function () { return {width: window.innerWidth, height: window.innerHeight}; };
            const same = function (a, b) { return a && b && a.width === b.width && a.height === b.height; };
            if (!window.__qkvizViewport) {
                window.__qkvizViewport = {sent: current || null, timer: null};
                window.addEventListener('resize', function () {
                    clearTimeout(window.__qkvizViewport.timer);
                    window.__qkvizViewport.timer = setTimeout(function () {
                        const now = size();
                        if (!same(now, window.__qkvizViewport.sent)) {
                            window.__qkvizViewport.sent = now;
                            window.dash_clientside.set_props(storeId, {data: now});
                        }
                    }, 250);
                });
            }
            const now = size();
            if (same(now, current)) { return window.dash_clientside.no_update; }
            window.__qkvizViewport.sent = now;
            return now;
        },

        /* An atlas exemplar's button -> {layer, head, sentence, point, timestamp}. */
        exemplarClick: function () { return buttonClick(['layer', 'head', 'sentence', 'point']); },

        /* A related head's button -> {layer, head, timestamp}. */
        relatedHeadClick: function () { return buttonClick(['layer', 'head']); },

        /* A corpus partner's button -> {point, timestamp}. */
        partnerClick: function () { return buttonClick(['point']); },

        /* An export button -> Plotly.downloadImage of its graph's figure as it is shown (dash_app/export.py):
         * one image of the whole figure, PNG at twice the screen's resolution or SVG. Returns
         * {graph, format, timestamp}, or no_update for a button being drawn. */
        exportFigure: function () {
            const context = window.dash_clientside.callback_context;
            const target = context.triggered_id;
            const value = context.triggered.length ? context.triggered[0].value : null;
            if (!target || typeof target !== 'object' || !value) { return window.dash_clientside.no_update; }
            const graph = plotlyGraph(target.graph);
            if (!graph || !graph._fullLayout) { return window.dash_clientside.no_update; }
            Plotly.downloadImage(graph, {format: target.format, filename: 'qkviz-' + target.name,
                                         width: graph._fullLayout.width, height: graph._fullLayout.height,
                                         scale: target.format === 'png' ? 2 : 1});
            return {graph: target.graph, format: target.format, timestamp: Date.now()};
        },

        /* The single view's token labels, when its "token labels" option is on: drawn only while at most
         * LABEL_LIMIT queries and keys lie in the 2D view (zooming in shows them, zooming out hides them),
         * by restyling the mode of traces 0 and 1 (the count in view is the graph's data-labels-in-view); 3D
         * figures are left as the server drew them. Writes nothing to its store. */
        labelsOnZoom: function (relayoutData, figure, options, graphId) {
            const LABEL_LIMIT = 300;
            const wanted = Array.isArray(options) && options.indexOf('labels') >= 0;
            /* after the graph has drawn the figure this callback may have been called for */
            setTimeout(function () {
                const graph = plotlyGraph(graphId);
                if (!graph || !graph._fullLayout || !graph._fullLayout.xaxis || !graph._fullData ||
                    graph._fullData.length < 2 || graph._fullData[0].type !== 'scattergl') { return; }
                const xRange = graph._fullLayout.xaxis.range, yRange = graph._fullLayout.yaxis.range;
                let inView = 0;
                [0, 1].forEach(function (index) {
                    const trace = graph._fullData[index];
                    for (let i = 0; i < trace.x.length; i++) {
                        if (trace.x[i] >= xRange[0] && trace.x[i] <= xRange[1] &&
                            trace.y[i] >= yRange[0] && trace.y[i] <= yRange[1]) { inView++; }
                    }
                });
                const mode = wanted && inView <= LABEL_LIMIT ? 'markers+text' : 'markers';
                graph.dataset.labelsInView = String(inView);
                if (graph.data[0].mode !== mode || graph.data[1].mode !== mode) {
                    Plotly.restyle(graph, {mode: mode, textposition: 'top center'}, [0, 1]);
                }
            }, 150);
            return window.dash_clientside.no_update;
        },

        /* The sentence view's hover: hovering a token shows only its lines, leaving shows them all again.
         * Line traces carry meta = [query position, key position] (dash_app/views/sentence.py); their
         * visibility is restyled here, with no round trip to the server. Writes nothing to its store. */
        showHoveredLines: function (hoverData, graphId) {
            const graph = plotlyGraph(graphId);
            if (!graph || !graph.data) { return window.dash_clientside.no_update; }
            const lines = [], visible = [];
            let side = -1, position = -1;
            if (hoverData && hoverData.points && hoverData.points.length) {
                const point = hoverData.points[0];
                const tokens = graph._fullData[point.curveNumber];
                if (point.curveNumber < 2 && tokens.customdata) {
                    side = point.curveNumber; position = Number(tokens.customdata[point.pointNumber]);
                }
            }
            graph.data.forEach(function (trace, index) {
                if (trace.meta === undefined || trace.meta === null || index < 2) { return; }
                lines.push(index);
                visible.push(side < 0 || trace.meta[side] === position);
            });
            if (lines.length) { Plotly.restyle(graph, {visible: visible}, lines); }
            return window.dash_clientside.no_update;
        }
    });
}());
