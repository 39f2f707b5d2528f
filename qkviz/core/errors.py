"""The one exception type for mistakes a user can fix.

Library code raises :class:`QkvizError` with a one-line message that says what is wrong and
what to do; the CLI prints that line and exits with status 2. Anything else is a bug and keeps
its traceback.
"""


class QkvizError(Exception):
    """A user-fixable problem (bad input, missing model, incomplete run)."""


class IncompleteRunError(QkvizError):
    """A run directory that has no finished manifest or whose files do not match it."""
