"""Names a package exports without importing their modules until first used (PEP 562): a package that must not
import torch on its own import (``import qkviz`` does not) still offers the names that need it."""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_names(package: str, modules: dict[str, str]) -> Callable[[str], object]:
    """A module ``__getattr__`` for ``package``: each name of ``modules`` is read from ``package.<its module>`` when
    first asked for; any other name is an AttributeError."""
    def __getattr__(name: str):
        if name in modules:
            return getattr(importlib.import_module(f"{package}.{modules[name]}"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
