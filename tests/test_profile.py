"""Profiles: durations, strict validation with errors naming file and key, built-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdcscan.errors import ProfileError, UsageError
from sdcscan.profile import builtin_profile_names, load_profile, parse_budget


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1h30m", 5400),
        ("45", 45),
        (30, 30),
        ("1.5m", 90),
        ("2d", 172800),
    ],
)
def test_parse_budget_accepts_common_forms(text, seconds):
    """Budgets like 90s, 15m, 2h and combinations parse to seconds."""
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["abc", "", "10x", "-5s", "0s", "99d", "s", True])
def test_parse_budget_rejects_garbage(text):
    """Bad budgets (and budgets over 30 days) raise UsageError (exit 2) with the offending text."""
    with pytest.raises(UsageError, match="duration"):
        parse_budget(text)


@pytest.mark.parametrize("name", builtin_profile_names())
def test_every_builtin_profile_loads(name):
    """Guard: every shipped profile is valid."""
    p = load_profile(name)
    assert p.workloads and p.budget_s > 0 and len(p.sha256) == 64


def test_builtin_profiles_are_the_documented_four():
    assert {"quick", "burnin", "qualify", "ripple"} <= set(builtin_profile_names())
    assert load_profile("quick").budget_s == 60
    assert load_profile("burnin").budget_s == 1000
    assert load_profile("ripple").budget_s == 5
    assert load_profile("qualify").seed is not None


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "p.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("version: 2\nworkloads: [{name: train}]", "version"),
        ("version: 1\nbudget: soon\nworkloads: [{name: train}]", "budget"),
        ("version: 1\nworkloads: [{name: nosuch}]", "workloads[0].name"),
        ("version: 1\nworkloads: [{name: train, params: {hidden: big}}]", "workloads[0].params.hidden"),
        ("version: 1\nworkloads: [{name: train, params: {nope: 1}}]", "workloads[0].params.nope"),
        ("version: 1\nworkloads: [{name: train, weight: 0}]", "workloads[0].weight"),
        ("version: 1\ncolour: red\nworkloads: [{name: train}]", "colour"),
        ("version: 1\nworkloads: []", "workloads"),
        ("version: 1\nseed: -1\nworkloads: [{name: train}]", "seed"),
        ("version: 1\nthreads_per_unit: 0\nworkloads: [{name: train}]", "threads_per_unit"),
        ("version: 1\nworkloads: [{name: train, params: {steps: 1e30}}]", "steps"),
        ("version: 1\nworkloads: [{name: train}, {name: train}]", "twice"),
        ("- just a list", "mapping"),
        ("version: 1\nversion: 1\nworkloads: [{name: train}]", "duplicate"),
        ("a: &x [1]\nb: *x", "aliases"),
        ("version: 1\nworkloads: [{name: train}\n", "invalid YAML"),
    ],
)
def test_profile_errors_name_the_file_and_the_key(tmp_path, text, needle):
    """Strict validation: each error names the file and the key that is wrong."""
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError) as err:
        load_profile(path)
    assert path in str(err.value)
    assert needle in str(err.value)


def test_missing_profile_file_is_a_profile_error(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        load_profile(str(tmp_path / "missing.yaml"))


def test_unknown_builtin_name_lists_the_builtins():
    with pytest.raises(ProfileError, match="quick"):
        load_profile("quik")


def test_plan_hash_ignores_budget_and_description_but_not_params(tmp_path):
    """The sha256 identifies the plan: budget and wording do not change it; parameters do."""
    a = load_profile(_write(tmp_path, "version: 1\nbudget: 10s\nworkloads: [{name: train}]"))
    b = load_profile(_write(tmp_path, "version: 1\nbudget: 99s\ndescription: x\nworkloads: [{name: train}]"))
    c = load_profile(_write(tmp_path, "version: 1\nworkloads: [{name: train, params: {steps: 7}}]"))
    assert a.sha256 == b.sha256 != c.sha256


def test_select_restricts_workloads_and_rejects_unknown():
    p = load_profile("quick")
    assert [w.name for w in p.select(["train"]).workloads] == ["train"]
    with pytest.raises(UsageError, match="did you mean"):
        p.select(["trian"])
