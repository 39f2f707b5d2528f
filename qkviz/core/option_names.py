"""How a message names an option: as the command line's flag when the command line is the caller, as the Python
argument otherwise.

A warning or an error that says which option to give is read by someone who typed ``qkviz stats --run R`` or by
someone who called ``qkviz.compute_stats(run)``; the first needs ``--head-update``, the second ``head_update=True``.
Such a message spells the option with :func:`option`, and the command line says once, around each command, that it
is the caller (:func:`command_line_caller`); any other caller is Python. The setting is an environment variable
rather than a module global so that the worker processes a command starts (``--jobs``' spawned pool, a local Dask
cluster) word their messages as the command does.

A message that names a whole command to run (``make it with 'qkviz project --run R --layers 3 --heads 4'``) is a
command for either reader and does not use it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

#: the environment variable that says who the caller is, and its value while the command line is
CALLER_VARIABLE = "QKVIZ_CALLER"
COMMAND_LINE = "command-line"


@contextmanager
def command_line_caller() -> Iterator[None]:
    """Within the block, messages name options as the command line's flags (the CLI wraps each command in it)."""
    before = os.environ.get(CALLER_VARIABLE)
    os.environ[CALLER_VARIABLE] = COMMAND_LINE
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CALLER_VARIABLE, None)
        else:
            os.environ[CALLER_VARIABLE] = before


def option(name: str, value: object = True, *, flag: str | None = None) -> str:
    """Option ``name`` (the Python argument's name) as the caller gives it.

    ``value=True`` (a switch): ``--head-update`` from the command line, ``head_update=True`` from Python;
    ``None`` (the option itself): ``--out`` / ``out``; any other value: ``--dtype float32`` / ``dtype='float32'``.
    ``flag``: the command line's flag where it is not the name with dashes (``client`` is ``--dask``)."""
    if os.environ.get(CALLER_VARIABLE) == COMMAND_LINE:
        flag = flag or "--" + name.replace("_", "-")
        return flag if value is True or value is None else f"{flag} {value}"
    return name if value is None else f"{name}={value!r}"


def option_with_n(name: str) -> str:
    """Option ``name`` given a number of tokens ``N``, as the caller gives it: ``--chunk N`` from the command line,
    ``chunk=N`` from Python."""
    spelled = option(name, None)
    return f"{spelled} N" if spelled.startswith("--") else f"{spelled}=N"
