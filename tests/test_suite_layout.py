"""Guard: test modules share code only through tests/helpers/ (plain functions) and conftest.py (fixtures)."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (imports inside functions count too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def is_test_module(name: str) -> bool:
    """`test_x`, `tests.test_x`, `conftest` or `tests.conftest`: modules pytest collects or loads itself."""
    last = name.removeprefix("tests.")
    return "." not in last and (last.startswith("test_") or last == "conftest")


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_module_imports_another(path: Path):
    """A helper two tests need moves to tests/helpers/ or becomes a conftest fixture."""
    assert not sorted(filter(is_test_module, imported_modules(path)))


def test_the_guard_recognises_test_modules():
    """The names the guard refuses, and the helpers it allows."""
    assert all(map(is_test_module, ["test_fuzz", "tests.test_run", "conftest", "tests.conftest"]))
    assert not any(
        map(is_test_module, ["tests.helpers.reports", "pytest", "sdcscan.report", "_pytest.fixtures"])
    )


@pytest.mark.xdist_group("suite_layout")
def test_under_loadgroup_a_tests_group_is_in_its_node_id(request: pytest.FixtureRequest) -> None:
    """The suite relies on `--dist loadgroup` keeping an xdist_group on one worker (worlds and Spark never
    side by side, a module's gloo world spawned once). pytest-xdist sends the group in the node id; a
    pytest that ignores the change (9.2, pytest-dev/pytest-xdist#1386) spreads every group silently."""
    if "PYTEST_XDIST_WORKER" not in os.environ or not request.config.getvalue("loadgroup"):
        pytest.skip("not a pytest-xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@suite_layout"), request.node.nodeid
