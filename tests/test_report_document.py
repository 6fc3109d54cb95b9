"""The report declared once (sdcscan.report.document): the shipped schema and the validator derive from it.

The schema file is generated: this fails when it differs from what the declaration generates, so a
change to the declaration without `python -m sdcscan.report.schema --write` cannot land. The markers
are tested both ways: a declared bound refuses a bad value and passes a good one; a field marked
UNCHECKED is accepted whatever it holds; a WRITTEN field is optional for readers, required in the schema.
"""

from __future__ import annotations

import copy
import json
import typing
from typing import Any

import jsonschema
import pytest

from sdcscan.errors import ReportError
from sdcscan.judgement.retest import CLASSIFICATIONS
from sdcscan.outcomes import STATUSES, VERDICTS
from sdcscan.report import SCHEMA_PATH, validate_report
from sdcscan.report.document import Cases, RetestClass, StatusWord, Unit, VerdictWord
from sdcscan.report.fields import fields_of
from sdcscan.report.schema import generate, main, schema_text
from sdcscan.report.validation import CASE_COLUMNS
from tests.helpers.reports import make_report


def test_shipped_schema_is_the_generated_one() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
        "report.schema.json differs from the declaration: run python -m sdcscan.report.schema --write"
    )


def test_generated_schema_is_valid_and_accepts_a_report() -> None:
    schema = generate()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(make_report(), schema)


def test_schema_requires_what_is_always_written_and_readers_need_less() -> None:
    unit = generate()["$defs"]["unit"]
    required = {f.name for f in fields_of(Unit) if f.required}
    assert required < set(unit["required"])  # model, throughput, notes: written, not relied on
    assert {"model", "throughput", "notes"} <= set(unit["required"])


def test_words_are_the_vocabulary() -> None:
    assert typing.get_args(VerdictWord) == VERDICTS
    assert typing.get_args(StatusWord) == STATUSES
    assert typing.get_args(RetestClass) == CLASSIFICATIONS
    assert tuple(f.name for f in fields_of(Cases)) == CASE_COLUMNS


def _refused(report: dict[str, Any]) -> str:
    with pytest.raises(ReportError) as err:
        validate_report(report, label="r.json")
    return str(err.value)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ("run", "profile", "sha256"),
            "abc",
            "r.json: run.profile.sha256: 'abc' is not of the form [0-9a-f]{64}",
        ),
        (("run", "budget_s"), 0.0, "r.json: run.budget_s: not more than 0"),
        (("run", "duration_s"), -1.0, "r.json: run.duration_s: less than 0"),
        (("units", 0, "kind"), "tpu", "r.json: units[0].kind: not one of cpu, cuda"),
        (("units", 0, "id"), "gpu0", "r.json: units[0].id: 'gpu0' is not of the form"),
        (("units", 0, "cases", "seconds", 2), -0.5, "r.json: units[0].cases.seconds[2]: less than 0"),
        (("units", 0, "cases", "seconds", 2), "1", "r.json: units[0].cases.seconds[2]: not a number"),
        (("tool", "name"), "other", "r.json: tool.name: not one of sdcscan"),
        (("units", 0, "throughput", "train", "efficiency"), "x", "efficiency: not a number or null"),
    ],
)
def test_declared_bounds_refuse(path: tuple[str | int, ...], value: object, message: str) -> None:
    report = make_report()
    validate_report(copy.deepcopy(report))  # the unchanged report passes
    target: Any = report
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert message in _refused(report)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("host", "cpu_model"), ["not", "a", "name"]),
        (("units", 0, "retest"), "garbled"),
        (("units", 0, "calibration"), {"x": 1}),
        (("run", "distributed"), 5),
        (("software",), "free text"),
    ],
)
def test_unchecked_fields_are_left_to_their_readers(path: tuple[str | int, ...], value: object) -> None:
    report = make_report()
    target: Any = report
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    validate_report(report)


def test_written_fields_are_optional_for_readers() -> None:
    report = make_report()
    for key in ("exit_code", "software", "cohorts", "mismatches"):
        del report[key]
    for unit in report["units"]:
        for key in ("model", "throughput", "notes"):
            del unit[key]
    validate_report(report)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(report, generate())


def test_schema_command_prints_and_writes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    assert main([]) == 0
    assert json.loads(capsys.readouterr().out) == generate()
    target = tmp_path / "schema.json"
    monkeypatch.setattr("sdcscan.report.schema.SCHEMA_PATH", target)
    assert main(["--write"]) == 0
    assert target.read_text(encoding="utf-8") == schema_text()
    assert main(["--bad"]) == 2
