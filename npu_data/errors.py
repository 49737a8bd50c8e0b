"""User-facing errors: one line that names the file, task or sample and the fix.

Two audiences read them: someone at the command line, who fixes a mistake with a flag
(``--resume``), and a Python caller, who passes a keyword (``resume=``). A message names the
options that fix it as data: ``{name}`` or ``{name=value}`` placeholders, ``name`` the
option's Python keyword, listed in ``option=`` (``UserError("... pass {resume} to continue",
option="resume")``). The message spells them for its audience when it is shown: as keywords
(``resume=``, ``shard_size=0``) by default, as the command's flags inside ``npu-data``
(``--resume``, ``--shard-size 0``: ``npu_data.cli`` shows every message of a command, and
every reason written meanwhile, ``spelled_as`` the command's flags).

Mistakes in the arguments of a library call are also the built-in exceptions Python callers
catch: ``UserValueError`` (``ValueError``), ``UserTypeError`` (``TypeError``),
``UserFileNotFoundError`` (``FileNotFoundError``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence

Spelling = Callable[[str, "str | None"], str]  # (option keyword, value or None) -> the text


def keyword(option: str, value: str | None = None) -> str:
    """How a Python caller passes ``option`` (with ``value``): ``resume=``, ``shard_size=0``."""
    return f"{option}=" if value is None else f"{option}={value}"


def flag(option: str, value: str | None = None) -> str:
    """The command-line flag of ``option`` where it follows the rule (``--max-side``; with
    ``value``: ``--max-side 0``; ``True`` is the bare flag, ``False`` no flag)."""
    return _flag("--" + option.replace("_", "-"), value)


def _flag(name: str, value: str | None) -> str:
    return name if value in (None, "True") else f"no {name}" if value == "False" else (
        f"{name} {value}")


def flags(aliases: Mapping[str, str]) -> Spelling:
    """A command's spelling: ``flag``, except for the options ``aliases`` maps (keyword, or
    ``keyword=value`` for one value of it) to a flag of another name (``{"timeout":
    "--download-timeout", "restart_markers=False": "--keep-jpeg-bytes"}``)."""
    def spell(option: str, value: str | None = None) -> str:
        if value is not None and f"{option}={value}" in aliases:
            return aliases[f"{option}={value}"]
        return _flag(aliases[option], value) if option in aliases else flag(option, value)
    return spell


_spelling: list[Spelling] = [keyword]  # the innermost ``spelled_as`` wins


@contextlib.contextmanager
def spelled_as(spelling: Spelling) -> Iterator[None]:
    """Spell the options of every message shown within (``str(error)``) with ``spelling``
    (the CLI: its command's flags). Process-wide: workers forked meanwhile inherit it."""
    _spelling.append(spelling)
    try:
        yield
    finally:
        _spelling.remove(spelling)


def render(template: str, options: Sequence[str], spelling: Spelling | None = None) -> str:
    """``template`` with each ``{option}`` / ``{option=value}`` of ``options`` spelled (the
    current way, or ``spelling``); any other text, braces included, is left as it is."""
    spell = spelling or _spelling[-1]
    for name in options:
        def spelled(m: re.Match[str], name: str = name) -> str:
            return spell(name, m.group(1))

        template = re.sub(r"\{" + re.escape(name) + r"(?:=([^{}]*))?\}", spelled, template)
    return template


class UserError(Exception):
    """A mistake in the user's input or arguments.

    Args:
        message: one line naming the file, task or sample, what is wrong and the fix; the
            options it names as ``{name}`` or ``{name=value}`` placeholders (``name``: the
            Python keyword).
        exit_code: the CLI's exit status for it.
        option: the option (or options) the placeholders name.

    The CLI prints ``error: <message>`` on one line, options spelled as its flags, and exits
    with ``exit_code``; library callers get the exception, options spelled as keywords.
    ``options`` holds the option keywords, ``template`` the unspelled message.
    """

    exit_code: int = 1

    def __init__(self, message: str, exit_code: int = 1, *,
                 option: str | Sequence[str] = ()) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.options: tuple[str, ...] = (option,) if isinstance(option, str) else tuple(option)

    @property
    def template(self) -> str:
        """The message with its ``{option}`` placeholders."""
        return str(self.args[0]) if self.args else ""

    def render(self, spelling: Spelling | None = None) -> str:
        """The message, options spelled by ``spelling`` (default: the current way)."""
        return render(self.template, self.options, spelling)

    def __str__(self) -> str:
        return self.render()


class UserValueError(UserError, ValueError):
    """A bad value of an argument or option (library callers catch ``ValueError``)."""


class UserTypeError(UserError, TypeError):
    """An argument of the wrong type, or an unknown keyword (``TypeError``)."""


class UserFileNotFoundError(UserError, FileNotFoundError):
    """A path the caller gave does not exist (``FileNotFoundError``)."""


class DataCorruption(UserError):
    """Stored data failed a checksum or a structural check."""
