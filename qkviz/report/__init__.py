"""Reports: the correlation report's model (no plotly) and its self-contained HTML pages, the head
atlas page, the figures the app shares with them, and the status of a run.
"""

from qkviz.report.colours import LABEL_COLOURS
from qkviz.report.model import Report, correlation_report
from qkviz.report.position_heatmap import relative_position_figure
from qkviz.report.report_directory import write_report
from qkviz.report.run_status import describe_run

__all__ = ["LABEL_COLOURS", "Report", "correlation_report", "describe_run", "relative_position_figure",
           "write_report"]
