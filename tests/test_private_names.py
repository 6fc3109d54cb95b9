"""No module reaches into another module's private names (issue 30: `fleet/warehouse.py` called six
private helpers of `compare.py`; a rule used from two places is a public rule, named as one)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.cli import ROOT

PACKAGE = ROOT / "sdcscan"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def reach_ins(path: Path) -> list[str]:
    """`from sdcscan.x import _name`, and `module._name` on a module imported from sdcscan."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sdcscan"):
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{path.name}:{node.lineno} imports {node.module}.{alias.name}")
                if not alias.name[:1].isupper():  # may be a module: `from sdcscan.fleet import perf`
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sdcscan"):
                    modules.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and _private(node.attr)
        ):
            found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in reach_ins(path)]
    assert found == []


def test_the_check_sees_a_reach_in(tmp_path: Path):
    """The check itself fires on both forms."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from sdcscan.fleet import perf\nfrom sdcscan.fleet.compare import _checked\nperf._is_judged\n"
    )
    assert reach_ins(probe) == [
        "probe.py:2 imports sdcscan.fleet.compare._checked",
        "probe.py:3 uses perf._is_judged",
    ]
