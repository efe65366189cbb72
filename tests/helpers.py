"""Helpers shared by tests of several packages."""

from __future__ import annotations


def exit_and_stderr(main, args, capsys) -> tuple[int, str]:
    """Exit status and stderr of a command run in this process (argparse errors raise SystemExit)."""
    try:
        code = main(args)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err
