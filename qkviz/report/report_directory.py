"""Writing a report directory: ``correlation.csv``, ``summary.json``, ``index.html``, ``atlas.html`` and
``assets/`` (plotly.js, once for both pages).

The files are written into a temporary sibling directory that is renamed into place, so a directory
named like the report is always a complete one. ``summary.json`` is written last and lists every other
file with its sha256 (``files``), so :func:`report_problems` tells a report changed or damaged since; an
existing directory is replaced only when it is a qkviz report holding nothing but the report's files.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.report.atlas_html import render_atlas_html
from qkviz.report.html_page import ASSETS_DIR, shared_assets
from qkviz.report.correlation_summary import ATLAS_HTML_NAME, CSV_NAME, HTML_NAME, SUMMARY_NAME, Report
from qkviz.report.report_html import render_html
from qkviz.store.files import file_sha256

logger = logging.getLogger(__name__)


def write_report(report: Report, out: str | Path, *, overwrite: bool = False) -> Path:
    """Write the report's files into the directory ``out``, atomically.

    Parameters
    ----------
    report
        From :func:`qkviz.correlation_report`.
    out
        The report directory: ``correlation.csv``, ``summary.json``, ``index.html`` and, when the run has
        a head atlas, ``atlas.html``; the pages load plotly.js from ``assets/`` beside them (no network).
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
        for name, content in shared_assets().items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(content)
        files = {name: file_sha256(staging / name) for name in _report_entries(staging) if name != SUMMARY_NAME}
        (staging / SUMMARY_NAME).write_text(json.dumps({**report.summary, "files": files}, indent=2) + "\n",
                                            encoding="utf-8")
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


#: the files a report directory holds besides its shared assets (those are listed in its summary's ``files``);
#: one holding anything else is never replaced
REPORT_FILES = (CSV_NAME, HTML_NAME, ATLAS_HTML_NAME, SUMMARY_NAME)


def report_problems(directory: str | Path) -> list[str]:
    """What is wrong with the report in ``directory``: each file its summary lists that is missing or no
    longer matches its sha256; an empty list for an intact report."""
    directory = Path(directory)
    summary = _summary(directory)
    if summary is None or not isinstance(summary.get("files"), dict):
        return [f"{directory} is not a qkviz report (no {SUMMARY_NAME} listing its files)"]
    problems = []
    for name, expected in summary["files"].items():
        path = directory / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif file_sha256(path) != expected:
            problems.append(f"{name} does not match its sha256")
    return problems


def check_destination(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that exists, unless ``overwrite`` and it is a qkviz report and nothing else (or empty)."""
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise QkvizError(f"{out} exists and is not a directory; choose another {option('out', None)}")
    if not overwrite:
        raise QkvizError(f"{out} already exists; pass {option('overwrite')} to replace it, or choose another "
                         f"{option('out', None)}")
    entries = _report_entries(out)
    summary = _summary(out)
    if entries and summary is None:
        raise QkvizError(f"{out} is not a qkviz report directory; refusing to replace it: choose another "
                         f"{option('out', None)}")
    listed = summary.get("files") if summary is not None else None
    known = {*REPORT_FILES, *(listed if isinstance(listed, dict) else ())}
    others = [name for name in entries if name not in known]
    if others:       # a run, or the user's own files, inside a report directory: never deleted
        raise QkvizError(f"{out} holds more than a qkviz report ({', '.join(others[:3])}); refusing to replace it: "
                         f"move those out or choose another {option('out', None)}")


def _report_entries(directory: Path) -> list[str]:
    """What ``directory`` holds by relative path: its entries, with the assets folder's in place of the folder."""
    entries = []
    for entry in directory.iterdir():
        if entry.name == ASSETS_DIR and entry.is_dir():
            entries += [f"{ASSETS_DIR}/{inside.name}" for inside in entry.iterdir()]
        else:
            entries.append(entry.name)
    return sorted(entries)


def _summary(directory: Path) -> dict | None:
    """The report's summary, or ``None`` when ``directory`` holds no qkviz report's summary."""
    try:
        summary = json.loads((directory / SUMMARY_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return summary if isinstance(summary, dict) and "run_fingerprint" in summary else None

