"""Every text model type transformers registers, through qkviz, on the pinned transformers and on the newest release
``pyproject.toml`` allows: exact, refused in one line, or "config cannot be built" (stated) — and nothing else.

Each type is a tiny random model (``tests/support/family_configs.py``) extracted in memory, its attention recomputed
from the run compared with the model's own eager attention (``tests/support/family_sweep.py``). The newest release
runs in a child process with the release that ``scripts/newest_transformers.py`` installed (by ``scripts/setup.sh``)
first on its path. The result says, per release, every type's outcome, and the counts for the 57 types of issue 27
and for the batch of 32 types no issue names, drawn at random (the goals are declared in this module's figure block, below).

    python -m bench.family_sweep                  # both releases: bench/results/family_sweep.json (~1 h on 2 cores)
    python -m bench.family_sweep --releases newest --add   # a new release added to the releases swept before
    python -m bench.family_sweep --types llama,gptj --out /tmp/sweep.json

The result records every release it covers, each with the date and commit it was swept at; ``--add`` sweeps the
releases asked for and keeps the file's others (a release swept again replaces its earlier sweep), so that a release
the registry serves later is added without sweeping the old ones again. The figure block says, release by release,
what changed from the one before.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

from bench.harness import Recorder, commit, smoke_arguments
from scripts.newest_transformers import NEWEST_DIRECTORY, installed_version
from bench.figures.goals import Goal, verdict
from bench.figures.results import Results, figure, source

REPO = Path(__file__).resolve().parent.parent
#: a smoke run: two types (one exact, one without attention) on the pinned release
SMOKE_TYPES = ["llama", "mamba2"]


def sweep(types: list[str] | None, seconds: int) -> dict:
    """This process's transformers: ``{"transformers", "rows"}`` (rows as ``support.family_sweep.sweep_type``)."""
    import transformers

    from bench.support.tiny_models import decoder_tokenizer
    from tests.support import CORPUS
    from tests.support.family_sweep import registered_text_types, sweep_type

    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line]
    tokenizer = decoder_tokenizer(lines)
    rows = []
    for model_type in types or registered_text_types():
        rows.append(sweep_type(model_type, lines[:6], tokenizer, seconds))
        print(f"{transformers.__version__} {model_type}: {rows[-1]['status']}", file=sys.stderr, flush=True)
    return {"transformers": transformers.__version__, "rows": rows, "swept_at": {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": commit()}}


def summarise(release: dict) -> dict:
    """Counts of every outcome, over all types, the 57 of issue 27 and the held-out batch."""
    from tests.support.family_sweep import FAILURES, HELD_OUT, ISSUE_27

    by_type = {row["model_type"]: row for row in release["rows"]}

    def counts(types) -> dict:
        present = [by_type[t]["status"] for t in types if t in by_type]
        return {"tried": len(present), **Counter(present)}

    return {"all": counts(by_type), "issue_27": counts(ISSUE_27), "held_out": counts(HELD_OUT),
            "failures": sorted(t for t, row in by_type.items() if row["status"] in FAILURES)}


def start_child(python_path: str, types: list[str] | None, seconds: int) -> tuple[subprocess.Popen, Path]:
    """:func:`sweep` started in a child process with ``python_path`` first on its path (another transformers
    release), beside this one (one core each); :func:`child_result` waits for it."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"family_sweep_{os.getpid()}.json"
    command = [sys.executable, "-m", "bench.family_sweep", "--child", str(out), "--seconds", str(seconds)]
    if types:
        command += ["--types", ",".join(types)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [python_path, str(REPO),
                                                                             os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(command, env=environment, cwd=REPO), out


def child_result(child: subprocess.Popen, out: Path) -> dict:
    if child.wait() != 0:
        raise SystemExit(f"the sweep on the newest release ended with status {child.returncode}")
    try:
        return json.loads(out.read_text(encoding="utf-8"))
    finally:
        out.unlink(missing_ok=True)


def release_key(release: dict):
    from packaging.version import Version

    return Version(release["transformers"])


def with_earlier_releases(releases: list[dict], path: Path) -> list[dict]:
    """``releases`` with those of the result file at ``path`` that they do not sweep again, oldest first."""
    result = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"figures": {"releases": []}}
    earlier = result["figures"]["releases"]
    for release in earlier:     # a release from before each one kept its own date: the file's
        release.setdefault("swept_at", {"date": result["date"], "commit": result["commit"]})
    swept = {release["transformers"] for release in releases}
    return sorted([release for release in earlier if release["transformers"] not in swept] + releases, key=release_key)


def changes(before: dict, after: dict) -> list[str]:
    """What changed from release ``before`` to ``after``: types whose outcome changed, types new in ``after``'s
    registry and types gone from it, each as ``"type: old -> new"``."""
    old = {row["model_type"]: row["status"] for row in before["rows"]}
    new = {row["model_type"]: row["status"] for row in after["rows"]}
    changed = [f"{name}: {old[name]} -> {new[name]}" for name in sorted(old.keys() & new.keys()) if old[name] != new[name]]
    added = [f"{name}: new, {new[name]}" for name in sorted(new.keys() - old.keys())]
    gone = [f"{name}: no longer registered" for name in sorted(old.keys() - new.keys())]
    return changed + added + gone


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", type=lambda text: text.split(","), default=None,
                        help="comma-separated model types (default: every registered text model type)")
    parser.add_argument("--seconds", type=int, default=120, help="time limit per type")
    parser.add_argument("--releases", default="pinned,newest", help="pinned, newest or both (comma-separated)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--add", action="store_true",
                        help="keep the releases the result file has already (those swept now replace theirs)")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = smoke_arguments(parser, argv, types=SMOKE_TYPES, releases="pinned")
    if args.child is not None:
        args.child.write_text(json.dumps(sweep(args.types, args.seconds)), encoding="utf-8")
        return
    recorder = Recorder("family_sweep", {key: value for key, value in vars(args).items() if key != "child"},
                        args.out)
    wanted = args.releases.split(",")
    if set(wanted) - {"pinned", "newest"}:
        raise SystemExit(f"--releases: {args.releases!r} names something other than pinned and newest")
    child = None
    if "newest" in wanted:
        if installed_version() is None:
            raise SystemExit(f"{NEWEST_DIRECTORY} holds no transformers: run scripts/setup.sh")
        child = start_child(str(NEWEST_DIRECTORY), args.types, args.seconds)
    releases = [sweep(args.types, args.seconds)] if "pinned" in wanted else []
    if child is not None:
        releases.append(child_result(*child))
    for release in releases:
        release["summary"] = summarise(release)
    if args.add:
        releases = with_earlier_releases(releases, recorder.out)
    path = recorder.write(releases=releases)
    print(f"wrote {path}")


# The figure blocks drawn from this bench's result files: what the pages say from them (``python -m bench.figures``;
# each registered by name with ``@figure``, a goal judged by ``bench.figures.goals.verdict``).

def _sweep_release(result: dict, newest: bool) -> dict:
    """The pinned (first) or the newest (last) release of ``bench.family_sweep``'s result."""
    releases = result["releases"]
    return releases[-1] if newest else releases[0]

def _exact(release: dict, part: str) -> float:
    return float(release["summary"][part].get("exact", 0))

#: the issue's goals for the families, judged on the newest transformers release the declared range allows
SWEEP_GOALS = (Goal("of the 57 model types of issue 27 exact with the newest transformers allowed", 52, "", False,
                    "family_sweep", "exact with the newest release", lambda r: _exact(_sweep_release(r, True),
                                                                                        "issue_27"), digits=0),
               Goal("of the batch of 32 drawn at random exact with the newest transformers allowed", 24, "", False,
                    "family_sweep", "exact with the newest release", lambda r: _exact(_sweep_release(r, True),
                                                                                        "held_out"), digits=0))

@figure("family-sweep")
def family_sweep(results: Results) -> str:
    """docs/families.md: every registered text model type through qkviz, on the pinned and the newest release."""
    result = results("family_sweep")

    def outcome(release: dict) -> str:
        counts = release["summary"]["all"]
        failures = release["summary"]["failures"]
        return (f"transformers {release['transformers']}: {counts['tried']} types, {counts.get('exact', 0)} exact, "
                f"{counts.get('refused', 0)} refused in one line, {counts.get('config cannot be built', 0)} whose tiny "
                f"configuration cannot be built; " + (f"**failures: {', '.join(failures)}**" if failures
                                                       else "no traceback, time-out or wrong result"))

    releases = result["releases"]
    pinned, newest = _sweep_release(result, False), _sweep_release(result, True)
    issue, held = SWEEP_GOALS
    exact = [row for release in releases for row in release["rows"] if row["status"] == "exact"]
    worst = max(exact, key=lambda row: row["max_error"])
    typical = sorted(row["max_error"] for row in exact)[len(exact) // 2]
    steps = []
    for before, after in zip(releases, releases[1:]):
        changed = changes(before, after)
        steps.append(f"{before['transformers']} to {after['transformers']}: "
                     + ("; ".join(changed) if changed else "no type's outcome changed"))
    return (f"Measured by `python -m bench.family_sweep`: {'; '.join(outcome(release) for release in releases)}. "
            f"What changed, release by release: {'. '.join(steps)}. The 57 types of "
            f"issue 27: {_exact(pinned, 'issue_27'):.0f} exact with {pinned['transformers']}, "
            f"{_exact(newest, 'issue_27'):.0f} with {newest['transformers']} (goal {verdict(issue, results)}). The "
            f"batch of 32 drawn at random (no longer held out: its configurations were fixed type by type): "
            f"{_exact(pinned, 'held_out'):.0f} exact with {pinned['transformers']}, "
            f"{_exact(newest, 'held_out'):.0f} with {newest['transformers']} (goal {verdict(held, results)}). "
            f"Largest difference from the model's own attention over every exact run: {worst['max_error']:.1e} "
            f"({worst['model_type']}), median {typical:.1e}. ({source(results, 'family_sweep')}"
            f"{_swept_dates(releases)}.)\n")


def _swept_dates(releases: list[dict]) -> str:
    """Each release's own sweep date where the releases were swept at different times (``--add``)."""
    dates = [(release["transformers"], release.get("swept_at", {}).get("date", "")[:10]) for release in releases]
    if len({date for _, date in dates if date}) <= 1:
        return ""
    return "; swept " + ", ".join(f"{version} on {date}" for version, date in dates if date)


if __name__ == "__main__":
    main()
