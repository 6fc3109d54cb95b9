"""Guard: test modules share code only through tests/helpers/ (plain functions) and conftest.py (fixtures)."""

from __future__ import annotations

import ast
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
