"""``module:attribute`` references (``ocsd.imports``) and user views that fail to load."""

from __future__ import annotations

import pytest

from ocsd.imports import import_reference
from ocsd.replay.views import load_view


def test_module_and_file_references(tmp_path):
    assert import_reference("ocsd.imports:import_reference", what="x") is import_reference
    f = tmp_path / "mine.py"
    f.write_text("VALUE = 41 + 1\n")
    assert import_reference(f"{f}:VALUE", what="x") == 42


@pytest.mark.parametrize("source, message", [
    ("def broken(:\n", "SyntaxError"),
    ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
])
def test_file_that_fails_to_import_is_one_line(tmp_path, source, message):
    f = tmp_path / "bad.py"
    f.write_text(source)
    with pytest.raises(ImportError, match=message) as err:
        import_reference(f"{f}:X", what="view 'bad'")
    assert str(err.value).startswith("view 'bad': importing") and "\n" not in str(err.value)


@pytest.mark.parametrize("ref, message", [("nomodule_xyz_123:X", "cannot import module"),
                                          ("ocsd.imports:nothing", "has no attribute 'nothing'"),
                                          ("no_colon", "expected 'module:attribute'"),
                                          ("/no/such/file.py:X", "does not exist")])
def test_bad_references(ref, message):
    with pytest.raises(ImportError, match=message):
        import_reference(ref, what="thing")


def test_view_class_needing_arguments(tmp_path):
    f = tmp_path / "views_args.py"
    f.write_text("class NeedsArgs:\n    name = 'n'\n    def __init__(self, k):\n        self.k = k\n"
                 "    def render(self, step, renderer):\n        return []\n")
    with pytest.raises(ValueError, match=r"NeedsArgs\(\) failed .*constructible without arguments"):
        load_view(f"{f}:NeedsArgs")


def test_view_module_raising_on_import(tmp_path):
    f = tmp_path / "views_raise.py"
    f.write_text("import nothing_here_xyz\n")
    with pytest.raises(ValueError, match="ModuleNotFoundError"):
        load_view(f"{f}:V")
