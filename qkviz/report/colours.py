"""Colours shared by the report's pages and the app, so that a label looks the same everywhere."""

from qkviz.analysis import LABELS

#: One colour per head pattern label (:data:`qkviz.analysis.LABELS`), from Plotly's qualitative palette.
LABEL_COLOURS = dict(zip(LABELS, ("#1f77b4", "#17becf", "#9467bd", "#8c564b", "#d62728", "#ff7f0e",
                                  "#bcbd22", "#2ca02c", "#aec7e8", "#9edae5", "#e377c2", "#ffbb78", "#98df8a",
                                  "#e41a1c", "#f781bf", "#a6d854", "#4b0082")))
