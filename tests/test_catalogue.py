"""The workload catalogue: torch-free, the README's table agrees with it, and `register` enforces the contract."""

from __future__ import annotations

import ast
import subprocess
import sys
from typing import Any, ClassVar

import pytest

from sdcscan.errors import ProfileError, UsageError
from sdcscan.outcomes import Case, Outcome
from sdcscan.profile import profile_from_data
from sdcscan.workloads import SPECS, WorkloadSpec, load, spec
from sdcscan.workloads.base import REGISTRY, Context, has_selftest, register
from tests.helpers.cli import ROOT, child_env

_TORCH_FREE = """
import sys
import sdcscan.profile, sdcscan.workloads
from click.testing import CliRunner
from sdcscan.cli import cli
sdcscan.profile.load_profile("burnin")  # every workload, parameters checked against the catalogue
listing = CliRunner().invoke(cli, ["workloads", "--json"])
assert listing.exit_code == 0, listing.output
print("torch" in sys.modules)
"""


def test_profiles_and_the_workload_listing_need_no_torch():
    """The parent validates profile parameters and `sdcscan workloads` lists them without importing torch."""
    out = subprocess.run(
        [sys.executable, "-c", _TORCH_FREE], capture_output=True, text=True, env=child_env(), check=True
    )
    assert out.stdout.strip() == "False"


def test_spec_and_load_suggest_the_closest_name_for_a_typo():
    assert spec("gemm_fp") is SPECS["gemm_fp"]
    for lookup in (spec, load):
        with pytest.raises(UsageError, match="did you mean 'gemm_int8'"):
            lookup("gemm_int9")


def test_reuse_product_is_not_a_profile_parameter():
    """A self-test shortcut must not be settable from a profile."""
    data = {"version": 1, "workloads": [{"name": "gemm_fp", "params": {"reuse_product": True}}]}
    with pytest.raises(ProfileError, match=r"workloads\[0\]\.params\.reuse_product: unknown key"):
        profile_from_data(data, label="p.yaml", default_name="p")


def _table_problems(readme: str) -> list[str]:
    """How README's workload table disagrees with the catalogue: missing or unknown rows, wrong cells."""
    section = readme.split("\n## Workloads\n", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    if header[:3] != ["workload", "evidence", "quality"]:
        return [f"table header is {header}"]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells
    problems = [f"row for unknown workload {n!r}" for n in sorted(set(rows) - set(SPECS))]
    for name, s in sorted(SPECS.items()):
        if name not in rows:
            problems.append(f"no row for {name!r}")
            continue
        if {e.strip() for e in rows[name][1].split(",")} != set(s.evidence):
            problems.append(f"{name}: evidence {rows[name][1]!r}, catalogue {', '.join(s.evidence)}")
        if rows[name][2] != s.quality.value:
            problems.append(f"{name}: quality {rows[name][2]!r}, catalogue {s.quality.value}")
    return problems


def test_readme_workload_table_matches_the_catalogue():
    """One row per workload, with exactly the catalogue's evidence kinds and quality; no unknown rows."""
    assert _table_problems((ROOT / "README.md").read_text(encoding="utf-8")) == []


def test_the_table_check_sees_each_kind_of_disagreement():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    wrong = readme.replace(
        "| `collective` | invariant | beta |", "| `collective` | invariant, consensus | prod |"
    )
    wrong = wrong.replace("| `train` |", "| `trian` |")
    assert _table_problems(wrong) == [
        "row for unknown workload 'trian'",
        "collective: evidence 'invariant, consensus', catalogue invariant",
        "collective: quality 'prod', catalogue beta",
        "no row for 'train'",
    ]


def _workload(name: str, *, module: str | None = None, spec_: WorkloadSpec | None = None) -> type[Any]:
    """A minimal workload class named `name`, as if defined in `module` (default: its own module)."""

    class Fake:
        spec: ClassVar[WorkloadSpec] = spec_ or SPECS.get(name) or SPECS["train"]

        def __init__(self, params: Any) -> None:
            self.params = params

        def prepare(self, ctx: Context) -> None:
            pass

        def run(self, ctx: Context, case: Case) -> Outcome:
            return Outcome(status="ok", digest="0")

    Fake.name = name  # type: ignore[attr-defined]
    Fake.__module__ = module or f"sdcscan.workloads.{name}.workload"
    return Fake


def test_register_accepts_a_class_that_matches_its_catalogue_entry(monkeypatch):
    load("train")
    monkeypatch.delitem(REGISTRY, "train")
    fake = _workload("train")
    assert register(fake) is fake and REGISTRY["train"] is fake


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: _workload("nosuch"), "no entry in sdcscan.workloads.SPECS"),
        (lambda: _workload("train", spec_=SPECS["gemm_fp"]), "spec must be SPECS"),
        (lambda: _workload("train", module="sdcscan.workloads.other"), "must be defined in"),
        (lambda: _workload("train"), "registered twice"),
    ],
)
def test_register_refuses_a_class_that_breaks_the_contract(make, message):
    load("train")  # registered: a second class of that name is a duplicate
    before = dict(REGISTRY)
    with pytest.raises(ValueError, match=message):
        register(make())
    assert before == REGISTRY


def test_has_selftest_needs_every_member_of_the_protocol():
    """Checking workloads implement the whole SelftestWorkload protocol; others, or a partial one, do not count."""
    swept = ["embbag_int8", "gemm_fp", "gemm_int8", "matmul_golden"]
    assert [n for n in sorted(SPECS) if has_selftest(load(n))] == swept
    partial = type("Partial", (_workload("train"),), {"negative_sites": (), "selftest_variants": {}})
    assert not has_selftest(partial)


def test_no_workload_module_imports_a_command_module():
    """Workloads are library code: they may use sdcscan.checks and their own package, never sdcscan.cli."""
    for path in sorted((ROOT / "sdcscan" / "workloads").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not [m for m in imported if m == "sdcscan.cli" or m.startswith("sdcscan.cli.")], path.name


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_parameter_declares_its_range_and_the_shipped_values_are_in_it(name):
    """One Param per default; the defaults, the tiny sizes and every self-test variant pass them all."""
    s = SPECS[name]
    assert set(s.params) == set(s.defaults)
    cls = load(name)
    variants = getattr(cls, "selftest_variants", {})
    for label, overrides in {"defaults": {}, "tiny": s.tiny, **variants}.items():
        merged = {**s.defaults, **overrides}
        assert [(k, s.param_problem(k, v)) for k, v in merged.items() if s.param_problem(k, v)] == [], label
        assert s.rules_problem(merged) is None, label


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("train", {"steps": 0}),
        ("matmul_golden", {"k": 1 << 20}),
        ("gemm_int8", {"shapes": [[4, 1, 8]]}),
        ("gemm_int8", {"path": "fast"}),
        ("embbag_int8", {"dim": 10}),
        ("embbag_int8", {"pooling": [5, 2]}),
        ("gemm_fp", {"repeats": [1, 1]}),
    ],
)
def test_what_the_catalogue_refuses_the_workload_cannot_run(name, params):
    """Spot checks that a refused value is one the workload itself rejects or fails on."""
    import torch

    cls = load(name)
    merged = {**cls.spec.defaults, **cls.spec.tiny, **params}
    assert any(cls.spec.param_problem(k, v) for k, v in params.items()) or cls.spec.rules_problem(merged)
    with pytest.raises((ValueError, IndexError, ZeroDivisionError)):
        workload = cls(merged)
        ctx = Context(unit="cpu:0", device=torch.device("cpu"), run_seed=1, params=merged)
        workload.prepare(ctx)
        ctx.begin_case(None)
        workload.run(ctx, Case(index=0, workload=name, seed=1, occurrence=0))
