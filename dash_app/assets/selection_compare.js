/* Clientside callbacks of the single view's selection panel and of the compare view (registered from
 * dash_app/panels/selection.py and dash_app/views/compare.py), in window.dash_clientside.qkviz as those of
 * clientside.js. Points are identified by their trace's customdata (a point's index in the head's joint
 * layout: query t is t, key t is n_tokens + t), never by coordinates; traces 0 and 1 hold the queries and keys.
 */
window.dash_clientside = window.dash_clientside || {};

(function () {
    const BASE_TRACES = [0, 1];
    const RING_TRACE = 2;

    function plotlyGraph(graphId) {
        const container = document.getElementById(graphId);
        return container ? container.querySelector('.js-plotly-plot') : null;
    }

    /* The customdata of each event point of a drawn graph's queries and keys traces: {curves, points} (the
     * overlays' points, which repeat some of theirs, and points without customdata left out). */
    function eventPoints(event, graph) {
        const curves = [], points = [];
        if (!event || !event.points || !graph || !graph._fullData) { return {curves: curves, points: points}; }
        event.points.forEach(function (point) {
            if (BASE_TRACES.indexOf(point.curveNumber) < 0) { return; }
            const trace = graph._fullData[point.curveNumber];
            if (!trace || trace.customdata === undefined || trace.customdata === null) { return; }
            const value = trace.customdata[point.pointNumber];
            if (value === undefined || value === null) { return; }
            curves.push(point.curveNumber);
            points.push(Number(value));
        });
        return {curves: curves, points: points};
    }

    /* {customdata: [trace, index]} over the base traces of a drawn graph. */
    function pointIndex(graph) {
        const index = new Map();
        BASE_TRACES.forEach(function (trace) {
            const data = graph._fullData[trace];
            if (!data || !data.customdata) { return; }
            for (let i = 0; i < data.customdata.length; i++) { index.set(Number(data.customdata[i]), [trace, i]); }
        });
        return index;
    }

    /* Ring the point whose customdata is value in a graph (value null: hide the ring). */
    function ring(graph, value) {
        if (!graph || !graph._fullData || graph.data.length <= RING_TRACE) { return; }
        let x = [], y = [], customdata = [];
        if (value !== null) {
            const found = pointIndex(graph).get(value);
            if (found) {
                const trace = graph._fullData[found[0]];
                x = [trace.x[found[1]]]; y = [trace.y[found[1]]]; customdata = [value];
            }
        }
        Plotly.restyle(graph, {x: [x], y: [y], customdata: [customdata]}, [RING_TRACE]);
    }

    /* The graph the triggering input belongs to, and the other one. */
    function sourceAndTarget(idA, idB) {
        const triggered = window.dash_clientside.callback_context.triggered;
        const fromB = triggered.length && triggered[0].prop_id.indexOf(idB + '.') === 0;
        return fromB ? [idB, idA] : [idA, idB];
    }

    window.dash_clientside.qkviz = Object.assign(window.dash_clientside.qkviz || {}, {
        /* Plotly selectedData -> {curves, points, timestamp}: each selected point's trace and customdata
         * (a cleared selection is empty lists). The server checks it again (dash_app/panels/selection.py). */
        selectionEvent: function (event, graphId) {
            const selected = eventPoints(event, plotlyGraph(graphId));
            selected.timestamp = Date.now();
            return selected;
        },

        /* Compare view: hovering a query or key rings it in both figures; leaving hides both rings. */
        linkHover: function (hoverA, hoverB, idA, idB) {
            const ends = sourceAndTarget(idA, idB);
            const source = plotlyGraph(ends[0]);
            const hovered = eventPoints(ends[0] === idA ? hoverA : hoverB, source);
            const value = hovered.points.length ? hovered.points[0] : null;
            ring(source, value);
            ring(plotlyGraph(ends[1]), value);
            return window.dash_clientside.no_update;
        },

        /* Compare view: a lasso or box selection in one figure selects the same points in the other (a
         * cleared selection clears it there). */
        linkSelection: function (selectedA, selectedB, idA, idB) {
            const ends = sourceAndTarget(idA, idB);
            const selected = eventPoints(ends[0] === idA ? selectedA : selectedB, plotlyGraph(ends[0]));
            const target = plotlyGraph(ends[1]);
            if (!target || !target._fullData) { return window.dash_clientside.no_update; }
            const cleared = !(ends[0] === idA ? selectedA : selectedB);
            const index = pointIndex(target);
            const chosen = BASE_TRACES.map(function () { return []; });
            selected.points.forEach(function (value, i) {
                const found = index.get(value);
                if (found) { chosen[found[0]].push(found[1]); }
            });
            Plotly.restyle(target, {selectedpoints: cleared ? [null, null] : chosen}, BASE_TRACES);
            return window.dash_clientside.no_update;
        }
    });
}());
