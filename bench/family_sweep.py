"""Every text model type transformers registers, through qkviz, on the pinned transformers and on the newest release
``pyproject.toml`` allows: exact, refused in one line, or "config cannot be built" (stated) — and nothing else.

Each type is a tiny random model (``tests/support/family_configs.py``) extracted in memory, its attention recomputed
from the run compared with the model's own eager attention (``tests/support/family_sweep.py``) and judged by the
families page's definition of exact (``tests/support/family_exactness.py``: within 1e-5, a type's own bound only for a
stated reason of precision, and at least 0.05 from uniform; a run within the gate's bound that misses it is "not
shown exact"). The newest release runs in a child process with the release that ``scripts/newest_transformers.py``
installed (by ``scripts/setup.sh``) first on its path; any other release can be swept the same way from a folder
it was installed in (``pip install --no-deps --target DIR transformers==X``). The result says, per release, every
type's outcome, and the counts for the 57 types of issue 27 and for the batch of 32 types no issue names, drawn at
random (the goals are declared in this module's figure block, below).

    python -m bench.family_sweep                  # both releases: bench/results/family_sweep.json (~1 h on 2 cores)
    python -m bench.family_sweep --releases newest --add   # a new release added to the releases swept before
    python -m bench.family_sweep --types openai-gpt,mobilebert --releases pinned,newest,/tmp/tf524 --add
                                                  # those types swept again, their rows replaced in each release
    python -m bench.family_sweep --rejudge        # every verdict of the file judged again from its recorded figures
    python -m bench.family_sweep --types llama,gptj --out /tmp/sweep.json

The result records every release it covers, each with the date and commit it was swept at; ``--add`` sweeps the
releases asked for and keeps the file's others (a release swept again replaces its earlier sweep), so that a release
the registry serves later is added without sweeping the old ones again. ``--add`` with ``--types`` replaces only
those types' rows in releases the file has, each such row with the date and commit it was swept at. Every verdict
the file keeps is judged again from its recorded error and departure by today's definition, which the result
records; a verdict that changes so is listed in the result (``rejudged``). The figure block says, release by
release, what changed from the one before.
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

from bench.figures.definitions import record
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
    """Counts of every outcome, over all types, the 57 of issue 27 and the random batch."""
    from tests.support.family_sweep import FAILURES, ISSUE_27, NOT_SHOWN, RANDOM_BATCH

    by_type = {row["model_type"]: row for row in release["rows"]}

    def counts(types) -> dict:
        present = [by_type[t]["status"] for t in types if t in by_type]
        return {"tried": len(present), **Counter(present)}

    return {"all": counts(by_type), "issue_27": counts(ISSUE_27), "random_batch": counts(RANDOM_BATCH),
            "failures": sorted(t for t, row in by_type.items() if row["status"] in FAILURES),
            "not_shown_exact": sorted(t for t, row in by_type.items() if row["status"] == NOT_SHOWN)}


def rejudge(releases: list[dict]) -> list[dict]:
    """Every row with a recorded error judged again by today's definition (``support.family_exactness.judge``),
    in place; each summary made again. Returns the verdicts that changed: ``{"transformers", "model_type", "was",
    "now"}``."""
    from qkviz.extraction.gate import FLOAT32_BOUND
    from tests.support.family_sweep import judge

    changed = []
    for release in releases:
        for row in release["rows"]:
            if "max_error" not in row:
                continue
            now = judge(row["model_type"], row["max_error"], row["departure_from_uniform"], FLOAT32_BOUND)
            if now != row["status"]:
                changed.append({"transformers": release["transformers"], "model_type": row["model_type"],
                                "was": row["status"], "now": now})
                row["status"] = now
        release["summary"] = summarise(release)
    return changed


def start_child(python_path: str, types: list[str] | None, seconds: int) -> tuple[subprocess.Popen, Path]:
    """:func:`sweep` started in a child process with ``python_path`` first on its path (another transformers
    release), beside this one (one core each); :func:`child_result` waits for it."""
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"family_sweep_{os.getpid()}_{abs(hash(python_path))}.json"
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


def earlier_releases(path: Path) -> list[dict]:
    """The releases of the result file at ``path`` (none where there is no file), each with the date it was swept."""
    result = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"figures": {"releases": []}}
    earlier = result["figures"]["releases"]
    for release in earlier:     # a release from before each one kept its own date: the file's
        release.setdefault("swept_at", {"date": result["date"], "commit": result["commit"]})
    return earlier


def with_earlier_releases(releases: list[dict], path: Path) -> list[dict]:
    """``releases`` with those of the result file at ``path`` that they do not sweep again, oldest first."""
    swept = {release["transformers"] for release in releases}
    kept = [release for release in earlier_releases(path) if release["transformers"] not in swept]
    return sorted(kept + releases, key=release_key)


def with_types_swept_again(releases: list[dict], path: Path) -> list[dict]:
    """The releases of the result file at ``path``, each type of ``releases`` (a sweep of a few types) replacing its
    row in the file's release of the same version, marked with the date and commit it was swept at. A release the
    file lacks cannot take a few types: it is swept whole first."""
    earlier = {release["transformers"]: release for release in earlier_releases(path)}
    missing = sorted(release["transformers"] for release in releases if release["transformers"] not in earlier)
    if missing:
        raise SystemExit(f"--types with --add replaces rows of releases the file has; it has no {', '.join(missing)}: "
                         "sweep that release whole first (--releases ... --add without --types)")
    for release in releases:
        rows = earlier[release["transformers"]]["rows"]
        at = {row["model_type"]: index for index, row in enumerate(rows)}
        for row in release["rows"]:
            row["swept_at"] = release["swept_at"]
            if row["model_type"] in at:
                rows[at[row["model_type"]]] = row
            else:
                rows.append(row)
    return sorted(earlier.values(), key=release_key)


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
    parser.add_argument("--releases", default="pinned,newest",
                        help="comma-separated: pinned, newest, or a folder a transformers release was installed in "
                             "(pip install --no-deps --target)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--add", action="store_true",
                        help="keep the releases the result file has already (those swept now replace theirs; with "
                             "--types, only those types' rows)")
    parser.add_argument("--rejudge", action="store_true",
                        help="sweep nothing: judge every verdict of the result file again from its recorded figures")
    parser.add_argument("--child", type=Path, default=None, help=argparse.SUPPRESS)
    args = smoke_arguments(parser, argv, types=SMOKE_TYPES, releases="pinned")
    if args.child is not None:
        args.child.write_text(json.dumps(sweep(args.types, args.seconds)), encoding="utf-8")
        return
    recorder = Recorder("family_sweep", {key: value for key, value in vars(args).items() if key != "child"},
                        args.out)
    if args.rejudge:
        releases = earlier_releases(recorder.out)
        if not releases:
            raise SystemExit(f"{recorder.out} holds no sweep to judge again")
        write(recorder, releases)
        return
    children, pinned = [], False
    for wanted in args.releases.split(","):
        if wanted == "pinned":
            pinned = True
        elif wanted == "newest":
            if installed_version() is None:
                raise SystemExit(f"{NEWEST_DIRECTORY} holds no transformers: run scripts/setup.sh")
            children.append(start_child(str(NEWEST_DIRECTORY), args.types, args.seconds))
        elif installed_version(Path(wanted)) is not None:
            children.append(start_child(str(Path(wanted).resolve()), args.types, args.seconds))
        else:
            raise SystemExit(f"--releases: {wanted!r} is not pinned, newest or a folder holding a transformers release")
    releases = [sweep(args.types, args.seconds)] if pinned else []
    releases += [child_result(*child) for child in children]
    for release in releases:
        release["summary"] = summarise(release)
    if args.add:
        releases = (with_types_swept_again(releases, recorder.out) if args.types
                    else with_earlier_releases(releases, recorder.out))
    write(recorder, releases)


def write(recorder: Recorder, releases: list[dict]) -> None:
    """The result: ``releases``, every verdict judged by today's definition (which it records) and the verdicts
    that changed so."""
    from tests.support.family_exactness import FAMILY_EXACT

    changed = rejudge(releases)
    for change in changed:
        print(f"{change['transformers']} {change['model_type']}: {change['was']} -> {change['now']} "
              "(judged again from its recorded figures)", file=sys.stderr)
    path = recorder.write(releases=releases, definition=record(FAMILY_EXACT), rejudged=changed)
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
                                                                                        "random_batch"), digits=0))

@figure("family-sweep")
def family_sweep(results: Results) -> str:
    """docs/families.md: every registered text model type through qkviz, on the pinned and the newest release."""
    result = results("family_sweep")

    def outcome(release: dict) -> str:
        counts = release["summary"]["all"]
        failures, unshown = release["summary"]["failures"], release["summary"]["not_shown_exact"]
        return (f"transformers {release['transformers']}: {counts['tried']} types, {counts.get('exact', 0)} exact, "
                f"{counts.get('refused', 0)} refused in one line, {counts.get('config cannot be built', 0)} whose tiny "
                f"configuration cannot be built"
                + (f", {len(unshown)} **not shown exact** ({', '.join(unshown)})" if unshown else "") + "; "
                + (f"**failures: {', '.join(failures)}**" if failures else "no traceback, time-out or wrong result"))

    releases = result["releases"]
    pinned, newest = _sweep_release(result, False), _sweep_release(result, True)
    issue, held = SWEEP_GOALS
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
            f"{_exact(pinned, 'random_batch'):.0f} exact with {pinned['transformers']}, "
            f"{_exact(newest, 'random_batch'):.0f} with {newest['transformers']} (goal {verdict(held, results)}). "
            f"{_exactness(result)} ({source(results, 'family_sweep')}{_swept_dates(releases)}.)\n")


def _exactness(result: dict) -> str:
    """What "exact" meant for the file's verdicts (the definition it records), and how close its exact runs came
    to its bounds: the largest error of the types held to the common bound, each own-bound type's, the smallest
    departure from uniform."""
    error, departure = result["definition"]["bounds"]
    own = error.get("own", {})
    exact = [row for release in result["releases"] for row in release["rows"] if row["status"] == "exact"]
    common = [row for row in exact if row["model_type"] not in own]
    worst = max(common, key=lambda row: row["max_error"])
    typical = sorted(row["max_error"] for row in common)[len(common) // 2]
    flattest = min(exact, key=lambda row: row["departure_from_uniform"])
    owns = "; ".join(f"{name} is held to {bound['bound']:.0e} ({bound['reason']}) and differs by "
                     f"{max(row['max_error'] for row in exact if row['model_type'] == name):.1e}"
                     for name, bound in own.items() if any(row["model_type"] == name for row in exact))
    return (f"Every verdict is judged by the definition the result records: exact within {error['most']:.0e} of the "
            f"model's own eager attention and at least {departure['least']} from uniform. Largest difference over "
            f"every exact run: {worst['max_error']:.1e} ({worst['model_type']}), median {typical:.1e}"
            + (f"; {owns}" if owns else "") + f". Smallest departure from uniform of an exact run: "
            f"{flattest['departure_from_uniform']:.2f} ({flattest['model_type']}).")


def _swept_dates(releases: list[dict]) -> str:
    """Each release's own sweep date where the releases were swept at different times (``--add``), and the types
    swept again since (``--add --types``), with their date."""
    dates = [(release["transformers"], release.get("swept_at", {}).get("date", "")[:10]) for release in releases]
    text = ("; swept " + ", ".join(f"{version} on {date}" for version, date in dates if date)
            if len({date for _, date in dates if date}) > 1 else "")
    again: dict[str, dict[str, list[str]]] = {}
    for release in releases:
        for row in release["rows"]:
            if "swept_at" in row:
                again.setdefault(row["swept_at"]["date"][:10], {}).setdefault(row["model_type"], []).append(
                    release["transformers"])
    for date, types in sorted(again.items()):
        text += "; swept again on " + date + ": " + ", ".join(f"{name} ({', '.join(versions)})"
                                                               for name, versions in sorted(types.items()))
    return text


if __name__ == "__main__":
    main()
