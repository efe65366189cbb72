"""``module:attribute`` references, the way user code (replay views) and engine runtimes are named."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

__all__ = ["import_reference"]


def _load_file(path: Path, what: str) -> Any:
    if not path.is_file():
        raise ImportError(f"{what}: file {path} does not exist")
    key = f"ocsd_user_module_{abs(hash(str(path.resolve())))}"
    if key in sys.modules:
        return sys.modules[key]
    loader_spec = importlib.util.spec_from_file_location(key, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ImportError(f"{what}: {path} is not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[key] = module
    try:
        loader_spec.loader.exec_module(module)
    except BaseException as err:  # a user's file: any failure is reported, never a traceback
        del sys.modules[key]
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        raise ImportError(f"{what}: importing {path} failed: {type(err).__name__}: {err}") from err
    return module


def import_reference(reference: str, *, what: str) -> Any:
    """The object a ``"module:attribute"`` or ``"path/to/file.py:attribute"`` reference names.

    Parameters
    ----------
    reference : str
        Dotted module name (or the path of a ``.py`` file), a colon, and an attribute name.
    what : str
        What is being imported, for error messages (``"view 'x:Y'"``).

    Raises
    ------
    ImportError
        With a one-line message naming ``what``: a malformed reference, a missing module or file, a
        module that fails while being imported (syntax error or any exception), or a missing attribute.
    """
    module_name, _, attr = str(reference).rpartition(":")
    if not module_name or not attr:
        raise ImportError(f"{what}: expected 'module:attribute', got {reference!r}")
    if module_name.endswith(".py"):
        module = _load_file(Path(module_name), what)
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ImportError(f"{what}: cannot import module {module_name!r}: {err}") from err
        except Exception as err:  # noqa: BLE001 - the module's own failure, reported in one line
            raise ImportError(f"{what}: importing module {module_name!r} failed: {type(err).__name__}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{what}: module {module_name!r} has no attribute {attr!r}") from None
