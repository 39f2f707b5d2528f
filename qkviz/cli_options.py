"""The command line's option types: each option is checked where it is parsed, with its range, so a bad
value is argparse's one-line error (exit status 2) naming the option, never a traceback later.

Each factory returns a function for ``argparse``'s ``type=``; its ``ArgumentTypeError`` message is
what the user reads after ``argument --name:``.
"""

from __future__ import annotations

import argparse
import errno
import math
import re
from typing import Callable

from qkviz.core.errors import QkvizError
from qkviz.cluster import parse_cluster

DEVICE_PATTERN = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")


def integer(low: int | None = None, high: int | None = None) -> Callable[[str], int]:
    """An integer in ``[low, high]`` (either bound may be open)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if (low is not None and value < low) or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is out of range: {_describe_range(low, high)}")
        return value

    return parse


def memory_size(text: str) -> int:
    """A size in bytes such as ``4G``, ``512M`` or ``2000000000`` (:func:`qkviz.probes.parse_memory`)."""
    from qkviz.core.errors import QkvizError
    from qkviz.probes import parse_memory

    try:
        return parse_memory(text)
    except QkvizError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def real(low: float | None = None, high: float | None = None, low_open: bool = False,
         infinite: bool = False) -> Callable[[str], float]:
    """A finite number in ``[low, high]`` (``(low, high]`` with ``low_open``); ``inf`` too when ``infinite``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if math.isnan(value) or (math.isinf(value) and not (infinite and value > 0)):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        below = low is not None and (value <= low if low_open else value < low)
        if below or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value:g} is out of range: {_describe_range(low, high, low_open)}")
        return value

    return parse


def device(text: str) -> str:
    """``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    if not DEVICE_PATTERN.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device: use cpu, cuda, cuda:N or mps")
    return text


def dask_cluster(text: str) -> str:
    """``tcp://host:port``, ``tls://host:port`` or ``local:N`` (see :func:`qkviz.cluster.parse_cluster`)."""
    try:
        parse_cluster(text)
    except QkvizError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text.strip()


def _describe_range(low, high, low_open: bool = False) -> str:
    if high is None:
        return f"it must be {'above' if low_open else 'at least'} {low:g}"
    if low is None:
        return f"it must be at most {high:g}"
    return f"it must be {'above' if low_open else 'from'} {low:g} {'and at most' if low_open else 'to'} {high:g}"


def describe_os_error(error: OSError) -> str:
    """One line for an operating-system error met while working: what happened, on which file, what to do."""
    where = f" {error.filename}" if error.filename else ""
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return (f"cannot write or read{where}: {error.strerror}; use a directory you may write to (copy a read-only "
                "run elsewhere first)")
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk is full (writing{where}); free some space and run the same command again: finished work "
                "is kept")
    if error.errno == errno.EADDRINUSE:
        return "the port is in use by another program: choose another with --port"
    return f"{error.strerror or type(error).__name__}{where}"
