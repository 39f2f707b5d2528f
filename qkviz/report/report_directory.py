"""Writing a report directory: ``correlation.csv``, ``summary.json``, ``index.html`` and ``atlas.html``.

The files are written into a temporary sibling directory that is renamed into place, so a directory
named like the report is always a complete one; an existing directory is replaced only when it is a
qkviz report.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from qkviz.core.errors import QkvizError
from qkviz.report.atlas_html import render_atlas_html
from qkviz.report.model import ATLAS_HTML_NAME, CSV_NAME, HTML_NAME, SUMMARY_NAME, Report
from qkviz.report.report_html import render_html

logger = logging.getLogger(__name__)


def write_report(report: Report, out: str | Path, *, overwrite: bool = False) -> Path:
    """Write the report's files into the directory ``out``, atomically.

    Parameters
    ----------
    report
        From :func:`qkviz.correlation_report`.
    out
        The report directory: ``correlation.csv``, ``summary.json``, ``index.html`` (self-contained,
        no network) and, when the run has a head atlas, ``atlas.html``.
    overwrite
        Replace an existing report directory (a directory that is not a qkviz report is never replaced).

    Returns
    -------
    Path
        ``out``.
    """
    out = Path(out)
    check_destination(out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        report.table.to_csv(staging / CSV_NAME, index=False, float_format="%.6f")
        (staging / HTML_NAME).write_text(render_html(report), encoding="utf-8")
        if report.atlas is not None:
            (staging / ATLAS_HTML_NAME).write_text(
                render_atlas_html(report.atlas, report.summary["model"], report.summary["run"]), encoding="utf-8")
        (staging / SUMMARY_NAME).write_text(json.dumps(report.summary, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            retired = out.with_name(f".{out.name}.replaced-{time.time_ns()}")
            out.rename(retired)
            staging.rename(out)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            staging.rename(out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.info("report written: %s", out / HTML_NAME)
    return out


#: everything a report directory holds; one holding anything else is never replaced
REPORT_FILES = (CSV_NAME, HTML_NAME, ATLAS_HTML_NAME, SUMMARY_NAME)


def check_destination(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that exists, unless ``overwrite`` and it is a qkviz report and nothing else (or empty)."""
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise QkvizError(f"{out} exists and is not a directory; choose another --out")
    if not overwrite:
        raise QkvizError(f"{out} already exists; pass --overwrite to replace it, or choose another --out")
    entries = sorted(entry.name for entry in out.iterdir())
    if entries and not _is_report(out):
        raise QkvizError(f"{out} is not a qkviz report directory; refusing to replace it: choose another --out")
    others = [name for name in entries if name not in REPORT_FILES]
    if others:       # a run, or the user's own files, inside a report directory: never deleted
        raise QkvizError(f"{out} holds more than a qkviz report ({', '.join(others[:3])}); refusing to replace it: "
                         "move those out or choose another --out")


def _is_report(directory: Path) -> bool:
    try:
        summary = json.loads((directory / SUMMARY_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(summary, dict) and "run_fingerprint" in summary
