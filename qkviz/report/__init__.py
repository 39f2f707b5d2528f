"""Reports: the correlation report's contents (``correlation_summary``, no plotly) and its HTML pages, the head atlas page (the pages
open offline, with one copy of plotly.js beside them), the figures and token colours the app shares with
them, and the status of a run.
"""

from qkviz.analysis.labels import LABEL_COLOURS   # declared with each label (qkviz.analysis.labels.registry)
from qkviz.report.correlation_summary import Report, correlation_report
from qkviz.report.position_heatmap import relative_position_figure
from qkviz.report.report_directory import write_report
from qkviz.report.run_status import describe_run
from qkviz.report.token_colours import (CATEGORIES, COLOURS, IMAGE_COLOURS, LOG_SCALE, PUNCTUATION_CLASSES, TEXT_COLOURS,
                                       colour_choices, colour_ticks, colour_title, colour_values, describe_value,
                                       token_features)
from qkviz.report.html_page import figure_html, page, shared_assets

__all__ = ["CATEGORIES", "COLOURS", "IMAGE_COLOURS", "LABEL_COLOURS", "LOG_SCALE", "PUNCTUATION_CLASSES", "Report",
           "TEXT_COLOURS", "colour_choices", "colour_ticks", "colour_title", "colour_values",
           "correlation_report", "describe_run", "describe_value", "relative_position_figure", "token_features",
           "write_report",
           "figure_html", "page", "shared_assets"]
