"""User-facing errors: one line that names the file, task or sample and the fix."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input or arguments.

    The CLI prints ``error: <message>`` on one line and exits with ``exit_code``;
    library callers get the exception with the same message.

    Args:
        message: One line naming the file, task or sample, what is wrong and the fix.
        exit_code: The CLI's exit status for it.
    """

    exit_code: int = 1

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class DataCorruption(UserError):
    """Stored data failed a checksum or a structural check."""
