"""The report's JSON Schema, generated from the declaration (`sdcscan.report.document`).

The shipped file `report.schema.json` is this module's output; tests/test_report_document.py fails
when they differ. After changing the declaration, regenerate it:

    python -m sdcscan.report.schema --write
"""

from __future__ import annotations

import json
import re
import sys
import typing

from sdcscan.report.document import SCHEMA_PATH, SCHEMA_VERSION, Report
from sdcscan.report.fields import Declared, declared, fields_of

__all__ = ["SCHEMA_PATH", "generate", "schema_text"]

JsonObject = dict[str, object]


def generate() -> JsonObject:
    """The schema of a report: the root object, every other declared object under `$defs`."""
    defs: dict[str, JsonObject] = {}
    root = _object(Report, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://sdcscan.invalid/report.schema.json",
        "title": "sdcscan report",
        "description": f"{_doc(Report)} schema_version {SCHEMA_VERSION}.",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(generate(), indent=2, ensure_ascii=False) + "\n"


def _object(cls: type, defs: dict[str, JsonObject]) -> JsonObject:
    fields = fields_of(cls)
    required = [f.name for f in fields if f.required or f.declared.written]
    out: JsonObject = {"type": "object"}
    if required:
        out["required"] = required
    out["properties"] = {f.name: _value(f.declared, defs) for f in fields}
    return out


def _value(d: Declared, defs: dict[str, JsonObject]) -> JsonObject:
    """The schema of one declared value, its description included."""
    out = _nullable(d, defs) if d.nullable else _plain(d, defs)
    return {**out, "description": d.doc} if d.doc else out


def _nullable(d: Declared, defs: dict[str, JsonObject]) -> JsonObject:
    out = _plain(d.without_null(), defs)
    if isinstance(out.get("type"), str):
        return {**out, "type": [out["type"], "null"]}
    if "enum" in out:
        return {**out, "enum": [*typing.cast(list[object], out["enum"]), None]}
    return {"anyOf": [out, {"type": "null"}]}


def _plain(d: Declared, defs: dict[str, JsonObject]) -> JsonObject:
    if d.is_object:
        cls = typing.cast(type, d.base)
        name = _def_name(cls)
        if name not in defs:
            defs[name] = {}  # reserved first: a declaration may refer to itself
            defs[name] = {"description": _doc(cls), **_object(cls, defs)}
        return {"$ref": f"#/$defs/{name}"}
    if d.origin is list:
        return {"type": "array", "items": _value(declared(d.args[0]), defs)}
    if d.origin is dict:
        values = declared(d.args[1])
        return (
            {"type": "object"}
            if values.base is object
            else {"type": "object", "additionalProperties": _value(values, defs)}
        )
    if d.origin is typing.Literal:
        return {"const": d.args[0]} if len(d.args) == 1 else {"enum": list(d.args)}
    if d.base is object:
        return {}
    kinds = {str: "string", bool: "boolean", int: "integer", float: "number"}
    out: JsonObject = {"type": kinds[typing.cast(type, d.base)]}
    if d.pattern is not None:
        out["pattern"] = f"^{d.pattern}$"
    if d.range is not None:
        for key, bound in (
            ("minimum", d.range.low),
            ("maximum", d.range.high),
            ("exclusiveMinimum", d.range.above),
        ):
            if bound is not None:
                out[key] = bound
    return out


def _def_name(cls: type) -> str:
    """RetestCase -> retest_case: the names under `$defs` other schemas may refer to."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def _doc(cls: type) -> str:
    return " ".join((cls.__doc__ or "").split())


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        SCHEMA_PATH.write_text(schema_text(), encoding="utf-8")
    elif argv:
        print("usage: python -m sdcscan.report.schema [--write]", file=sys.stderr)
        return 2
    else:
        sys.stdout.write(schema_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
