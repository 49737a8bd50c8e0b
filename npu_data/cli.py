"""The ``npu-data`` command: a thin dispatcher over ``npu_data.commands``.

Each command lives in its own module exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``, and ``FLAGS`` where an option's flag is
not ``--<keyword with dashes>`` (``npu_data.errors.flags``: a command's errors name the
options that fix them as data, spelled here as its flags). Exit codes: 0 success,
1 failure (bad input, failed check), 2 usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from npu_data.errors import UserError, flags, spelled_as

# Modules under npu_data.commands, in the order --help lists them.
COMMANDS = (
    "import_", "encode", "inspect", "verify", "show", "parity", "bench", "demo", "pull", "export_wds",
    "doctor",
)


def _load(name: str):  # type: ignore[no-untyped-def]
    try:
        return importlib.import_module(f"npu_data.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"npu_data.commands.{name}":
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    parser = argparse.ArgumentParser(
        prog="npu-data",
        description="Label Studio exports to memory-mapped shards, fed to on-device augmentation.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        mod = _load(name)
        if mod is None:
            continue
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run, _flags=getattr(mod, "FLAGS", {}))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``npu-data`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    from npu_data.annotations.redact import redact_text  # no URL secret is ever shown
    from npu_data.common.text import one_line  # no control character reaches the terminal

    try:
        with spelled_as(flags(args._flags)):  # messages and reasons name this command's flags
            try:
                return int(args._run(args) or 0)
            except UserError as exc:  # shown while its options are spelled as flags
                print(f"error: {one_line(redact_text(exc), None)}", file=sys.stderr)
                return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a full disk, a read-only folder, permissions: one line
        from npu_data.common.oserrors import os_error

        print(f"error: {one_line(redact_text(os_error(exc)), None)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
