"""The architecture, checked at run time: what must stay torch-free, and that every package ships.

The static rules (layers, rich only in render, no cycles) are import-linter contracts in
pyproject.toml, run by `.ci/run`; these tests check what a static graph cannot.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself needs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _modules_loaded_by(code: str) -> set[str]:
    """Run `code` in a fresh interpreter (this one has torch loaded already) and list its modules."""
    probe = f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "code",
    [
        "import sdcscan.cli, sdcscan.fleet, sdcscan.report, sdcscan.outcomes",
        # The parent process of `sdcscan run`: options, profile validation, the run core, outputs.
        "import sdcscan.scan, sdcscan.cli.run, sdcscan.profile; sdcscan.profile.load_profile('burnin')",
        "import sdcscan.fleet.compare, sdcscan.fleet.golden, sdcscan.judgement.rebuild, sdcscan.outputs.publish",
        "from sdcscan.cli import cli; from click.testing import CliRunner; CliRunner().invoke(cli, ['workloads'])",
        # The commands that read reports and the history, as a user runs them on a real report.
        "from sdcscan.cli import cli; from click.testing import CliRunner; import tempfile, os\n"
        "d = tempfile.mkdtemp(); h = os.path.join(d, 'h.db'); r = 'tests/data/report_v1.json'\n"
        "for args in (['report', r], ['compare', r], ['export', r, '--junit', os.path.join(d, 'j.xml')],\n"
        "             ['status', '--history', h], ['history', '--history', h]):\n"
        "    assert CliRunner().invoke(cli, args).exit_code == 0, args",
    ],
)
def test_parent_side_never_imports_torch(code: str) -> None:
    """Importing the command line, fleet, report and the run's parent costs no torch import."""
    assert "torch" not in _modules_loaded_by(code)


def test_the_probe_sees_torch_when_it_is_imported() -> None:
    """The probe above can fail: a module that imports torch is seen."""
    assert "torch" in _modules_loaded_by("import sdcscan.workloads.base")


def test_every_subpackage_is_shipped() -> None:
    """pyproject lists its packages by hand (profiles/ lives outside sdcscan/): none may be missing."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "sdcscan").rglob("__init__.py")}
    assert on_disk | {"sdcscan.profiles"} == listed
    assert config["tool"]["setuptools"]["package-dir"] == {"sdcscan.profiles": "profiles"}
    assert sorted(p.stem for p in (ROOT / "profiles").glob("*.yaml")) == [
        "burnin",
        "doctor",
        "healthcheck",
        "qualify",
        "quick",
        "ripple",
    ]


def test_the_readmes_layout_names_every_top_level_module_and_package() -> None:
    """A newcomer reads the layout first: every module (X.py) and package (X/) directly under sdcscan/
    is named in the README's "How the code is laid out" block, and nothing it names is gone."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("## How the code is laid out")
    block = readme[readme.index("```", start) + 3 : readme.index("```", readme.index("```", start) + 3)]
    named = set(re.findall(r"(?<![\w/.])([a-z_]+)(?:\.py|/)", block))
    package = ROOT / "sdcscan"
    present = {p.stem for p in package.glob("*.py") if not p.name.startswith("__")}
    present |= {p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert present - named == set(), "not in the README's layout"
    assert {n for n in named if (package / f"{n}.py").exists() or (package / n).is_dir()} == present


def test_the_readmes_shapes_of_a_case_are_the_trees() -> None:
    """The README's table of a case's shapes names, for each, a declaration that exists in the module it
    names (a renamed or merged record fails here); at most eight shapes (issue 46), none named twice."""
    import importlib

    readme = (ROOT / "README.md").read_text()
    start = readme.index("### A case on its way from the worker to the fleet")
    table = [
        line for line in readme[start : readme.index("###", start + 4)].splitlines() if line.startswith("| ")
    ]
    shapes = []
    for line in table[1:]:  # below the header (the rule below it starts "|-")
        shape, where = line.split("|")[1:3]
        name, path = re.findall(r"`([^`]+)`", shape)[0], re.findall(r"`([^`]+)`", where)[0]
        module = importlib.import_module("sdcscan." + path.removesuffix(".py").replace("/", "."))
        assert name in (module.SCHEMA if name == "cases" else vars(module)), f"{name} is not in {path}"
        shapes.append(name)
    assert 0 < len(shapes) <= 8 and len(set(shapes)) == len(shapes), shapes


def test_a_modules_name_says_one_thing() -> None:
    """A module name names one thing in the library (issue 46: `assemble`, `steps` and `ops` named three
    pairs of different things). The command line's halves repeat the name of what they drive (cli/run.py,
    render/run.py), and every workload package has the same three files; nothing else repeats."""
    package = ROOT / "sdcscan"
    per_workload = {"spec", "workload", "selftest_spec"}
    places: dict[str, list[str]] = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).parts
        if path.name == "__init__.py" or parts[0] in ("cli", "render"):
            continue
        if parts[0] == "workloads" and len(parts) == 3 and path.stem in per_workload:
            continue
        places.setdefault(path.stem, []).append("/".join(parts))
    assert {name: where for name, where in places.items() if len(where) > 1} == {}
