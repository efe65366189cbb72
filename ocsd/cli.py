"""Command-line conventions shared by every ``python -m`` command of the suite.

- Bad input (a flag, a file, a field) is one line ``error: ...`` on stderr and exit status 2,
  raised as :class:`UsageError` or one of the error classes a command passes to :func:`run_main`.
- ``--json`` prints exactly one JSON object on stdout (:func:`emit`); warnings and progress go to
  stderr. :func:`jsonable` is the one conversion to plain JSON types (also used for ``meta.json``).
- Tables are plain text with aligned columns (:func:`format_table`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["InputError", "UsageError", "SkipCommand", "positive_int", "non_negative_int", "folder_problem",
           "write_problem", "output_folder", "jsonable", "write_json", "fmt", "format_table", "emit", "run_main",
           "entry_point", "Once", "same_place"]


class InputError(ValueError):
    """Bad input that a command reports in one line naming the flag, file or field. Exit status 2.

    The base of :class:`UsageError` and of the replay-score format's ``ocsd.records.RecordError``, so that
    :func:`run_main` handles both without importing the format."""


class UsageError(InputError):
    """A command-line flag or input is wrong; the message names it. Exit status 2."""


class SkipCommand(Exception):
    """The inputs exist but cannot support the output; the message says what is missing. Exit status 1."""


def positive_int(flag: str) -> Callable[[str], int]:
    """An ``argparse`` type: an integer >= 1, the error naming ``flag``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be >= 1, got {value}")
        return value

    return parse


class Once(argparse.Action):
    """An option that may be given once: a second value is a usage error (exit 2) instead of silently replacing
    the first (``--run A --run B`` of a command that reads one run)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) not in (None, self.default):
            parser.error(f"{option_string} is given twice ({getattr(namespace, self.dest)} and {values}); this "
                         f"command reads one")
        setattr(namespace, self.dest, values)


def same_place(a: str, b: str) -> bool:
    """Whether two names given on command lines or in records (run folders, model names or folders) name the same
    thing: equal text, or two existing paths of one file or folder (``~`` expanded)."""
    if a == b:
        return True
    first, second = Path(a).expanduser(), Path(b).expanduser()
    return first.exists() and second.exists() and first.resolve() == second.resolve()


def non_negative_int(flag: str) -> Callable[[str], int]:
    """An ``argparse`` type: an integer >= 0 (a seed), the error naming ``flag``."""

    def parse(text: str) -> int:
        if not text.strip().isdecimal():
            raise argparse.ArgumentTypeError(f"{flag} must be an integer >= 0, got {text!r}")
        return int(text)

    return parse


def folder_problem(path: str | Path, *, write: bool = False) -> str | None:
    """Why ``path`` cannot be a folder to write into, or None: it is empty (which would mean the current
    folder), or it or a folder above it is a file; with ``write``, also when the folder (or, where it is
    still to be created, the nearest folder above it that exists) cannot be written (:func:`write_problem`)."""
    if not str(path).strip():
        return "empty (it would mean the current folder); name a folder"
    folder = Path(path).expanduser()
    existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
    if existing is None:
        return None
    if existing.is_dir():
        return write_problem(existing) if write else None
    return f"{existing} is a file, not a folder"


def write_problem(folder: str | Path) -> str | None:
    """Why nothing can be written into the existing folder ``folder`` (read-only, no permission), or None.

    The folder is tried for real (a hidden empty file is created and removed at once), so the answer is the file
    system's own: permission bits, read-only mounts, and the superuser, whom permission bits do not stop."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".write-check-", dir=folder)
    except OSError as exc:
        return f"{folder} cannot be written ({exc.strerror or type(exc).__name__})"
    os.close(handle)
    os.unlink(probe)
    return None


def output_folder(text: str) -> str:
    """An ``argparse`` type: a folder to write into, created later if missing; it must be writable
    (:func:`folder_problem`)."""
    problem = folder_problem(text, write=True)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def jsonable(value: Any) -> Any:
    """``value`` in plain JSON types: numpy scalars and arrays become Python numbers and lists, paths
    strings, and non-finite floats ``None``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    return value


def write_json(path: str | os.PathLike, value: Any, *, indent: int = 2) -> Path:
    """Write ``value`` (through :func:`jsonable`) as indented JSON with a final newline into ``path``; returns it.

    Raises
    ------
    ValueError
        ``value`` holds a non-finite float that :func:`jsonable` could not reach (say, as a dict key).
    """
    path = Path(path)
    path.write_text(json.dumps(jsonable(value), indent=indent, allow_nan=False) + "\n")
    return path


def fmt(value: Any, digits: int = 3) -> str:
    """A number for a table: fixed digits, ``nan`` for missing."""
    if value is None:
        return "nan"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    return "nan" if not math.isfinite(value) else f"{value:.{digits}f}"


def format_table(headers: Sequence[str], rows: Sequence[Sequence], *, title: str | None = None) -> str:
    """Plain-text table with aligned columns (first column left, others right)."""
    cells = [[str(h) for h in headers]] + [[c if isinstance(c, str) else fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row):
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))

    out = [title] if title else []
    out += [line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]]
    return "\n".join(out)


def emit(as_json: bool, result: dict, table: str) -> None:
    """Print ``result`` as one JSON object (``as_json``) or ``table``."""
    if as_json:
        sys.stdout.write(json.dumps(jsonable(result), allow_nan=False) + "\n")
    else:
        sys.stdout.write(table.rstrip("\n") + "\n")
    sys.stdout.flush()


def _warning_line(message, category, filename, lineno, line=None) -> str:
    """A warning as one line ``warning: <message>`` (no source line): what a user of a command reads."""
    return f"warning: {message}\n"


def run_main(body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None = None, *,
             errors: tuple[type[BaseException], ...] = (), prog: str | None = None) -> int:
    """Run a command body: :class:`UsageError`, the record errors, missing files and ``errors`` exit 2
    with ``error: ...``; :class:`SkipCommand` exits 1 with ``<prog>: skipped: ...``. Warnings are printed
    as one line each, ``warning: ...``. Output piped into a reader that stops early (``| head``) ends the
    command quietly with status 141, as for other Unix tools."""
    warnings.simplefilter("default")
    warnings.formatwarning = _warning_line
    try:
        return body(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    except SkipCommand as exc:
        sys.stderr.write(f"{prog + ': ' if prog else ''}skipped: {exc}\n")
        return 1
    except (InputError, FileNotFoundError, NotADirectoryError, *errors) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


def entry_point(body: Callable[[Sequence[str] | None], int], prog: str, *,
                errors: tuple[type[BaseException], ...] | Callable[[], tuple] = ()) -> Callable[..., int]:
    """The ``main(argv=None)`` of the command ``python -m <prog>``: ``body`` run by :func:`run_main`.

    Parameters
    ----------
    body : callable
        ``body(argv) -> exit status``, the command itself.
    prog : str
        The module run by ``python -m``; it names the command in skip messages.
    errors : tuple of exception types, or a callable returning one
        Further exceptions reported as bad input (exit 2); a callable is called when the command runs (for
        exception types whose module is costly to import).
    """
    def main(argv: Sequence[str] | None = None) -> int:
        return run_main(body, argv, errors=errors() if callable(errors) else errors, prog=prog)

    main.__doc__ = f"Entry point of ``python -m {prog}`` on ``argv`` (default ``sys.argv[1:]``); the exit status."
    main.__qualname__ = main.__name__ = "main"
    return main
