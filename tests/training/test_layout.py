"""The import structure of :mod:`training` (lazy imports inside functions count too): no cycle between its modules,
the environment engines (:mod:`training.envs`) never import the trainer, and the run config imports no module that
imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp", reason="grimp (import-linter, the test extra) is not installed")

TRAINING = Path(__file__).resolve().parents[2] / "training"


@pytest.fixture(scope="module")
def graph():
    return grimp.build_graph("training", cache_dir=None)


def test_no_module_of_training_is_in_an_import_cycle(graph):
    cycles = sorted((a, b) for a in graph.modules for b in graph.find_modules_directly_imported_by(a)
                    if graph.chain_exists(importer=b, imported=a))
    assert cycles == []


def test_environment_engines_import_no_other_part_of_training(graph):
    outside = sorted((m, i) for m in graph.modules if m.startswith("training.envs")
                     for i in graph.find_modules_directly_imported_by(m) if not i.startswith("training.envs"))
    assert outside == []


def test_the_config_is_below_everything_that_reads_it(graph):
    assert not graph.find_upstream_modules("training.config") & graph.find_downstream_modules("training.config")
    assert not any(m.startswith("training.rollout") for m in graph.find_upstream_modules("training.config"))


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in sorted(TRAINING.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("training", "ocsd")):
                found += [f"{path.relative_to(TRAINING.parent)}:{node.lineno} {node.module}.{alias.name}"
                          for alias in node.names if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []
