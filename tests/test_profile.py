"""Profiles: durations, strict validation with errors naming file and key, built-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from sdcscan.errors import ProfileError, UsageError
from sdcscan.profile import builtin_profile_names, load_profile, parse_budget, profile_from_data


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


SECRET = "s3cr3tHashValue"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (f"x: [1, 2 {SECRET}\n", "line 2, column 1"),  # PyYAML would quote the line with a caret under it
        (f'k: "\\q {SECRET}"\n', "line 1, column 6"),  # and the character it stumbled on
        (f"version: 1\n  bad: {SECRET}: x\n", "line 2"),
        (f"a: b\x00{SECRET}\n", "line 1, column 5"),  # a control character: an offset, made a line and column
        (f"version: 1\nworkloads: !!python/object/apply:os.system ['{SECRET}']\n", "line 2"),
    ],
)
def test_yaml_errors_give_line_and_column_but_never_the_file_text(tmp_path, text, where):
    path = tmp_path / "p.yaml"
    path.write_bytes(text.encode())
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    message = str(err.value)
    assert message.startswith(f"{path}: invalid YAML") and where in message
    assert SECRET not in message and "\n" not in message and "^" not in message


def test_a_password_file_given_as_profile_is_refused_without_a_line_of_it(tmp_path):
    """Its lines end in ':' so YAML reads them as keys: a key that is no identifier is not printed."""
    path = tmp_path / "shadow"
    path.write_text(f"root:$6$salt${SECRET}:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n")
    with pytest.raises(ProfileError) as err:
        load_profile(str(path))
    assert "unknown key" in str(err.value) and SECRET not in str(err.value) and "$6$" not in str(err.value)
    with pytest.raises(ProfileError, match=r"colour: unknown key"):  # a key that reads like one is named
        load_profile(_write(tmp_path, "version: 1\ncolour: red\nworkloads: [{name: train}]"))


@pytest.mark.parametrize(
    "text",
    [
        f"version: '{SECRET * 5}'\nworkloads: [{{name: train}}]",
        f"version: 1\nname: [{SECRET * 5}]\nworkloads: [{{name: train}}]",
        f"version: 1\nbudget: '{SECRET * 5}'\nworkloads: [{{name: train}}]",
        f"version: 1\nworkloads: [{{name: '{SECRET * 5}'}}]",
        f"version: 1\nworkloads: [{{name: train, params: {{dtype: '{SECRET * 5}'}}}}]",
    ],
)
def test_values_in_errors_are_cut_short(tmp_path, text):
    """A value in a message is cut to about 40 characters: enough to find it, not a line of a file."""
    with pytest.raises(ProfileError) as err:
        load_profile(_write(tmp_path, text))
    assert SECRET * 3 not in str(err.value) and "…" in str(err.value)  # 45 characters of it


def test_profile_paths_that_are_not_regular_files_are_refused_without_reading(tmp_path):
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    for path in (str(fifo), str(tmp_path), "/dev/zero"):
        with pytest.raises(ProfileError, match="not a regular file"):
            load_profile(path)


def test_select_of_no_workload_is_an_error_not_everything():
    with pytest.raises(UsageError, match="names no workload"):
        load_profile("quick").select([])


def test_a_workload_that_computes_other_data_makes_another_plan(monkeypatch):
    """SPECS[...].data_version enters the plan's hash (old goldens do not apply): each version of a
    workload's data makes another plan, and the same version the same plan."""
    import dataclasses

    from sdcscan import profile as profile_module
    from sdcscan.workloads import SPECS

    data = {"version": 1, "workloads": [{"name": "train"}, {"name": "matmul_golden"}]}
    hashes = []
    for version in (1, 2, 3, 1):
        monkeypatch.setitem(SPECS, "train", dataclasses.replace(SPECS["train"], data_version=version))
        hashes.append(profile_from_data(data, label="t", default_name="t").sha256)
    assert len(set(hashes[:3])) == 3 and hashes[3] == hashes[0]
    assert profile_module.SPECS is SPECS
