"""Ways to spoil one field of a report, shared by the hostile-report and fuzz tests."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.helpers.reports import make_report

RAW = "@@raw-json@@"  # a string replaced by raw JSON text after serialisation (what json.dumps cannot write)
HUGE_INT = "1" + "0" * 5000  # beyond Python's 4300-digit limit on int <-> str conversion

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Mutation:
    """One way to spoil a field: a replacement value (RAW: `raw` is pasted in as JSON text) or removal."""

    name: str
    value: Any = None
    raw: str | None = None
    remove: bool = False


MUTATIONS = (
    Mutation("null", None),
    Mutation("true", True),
    Mutation("string", "x"),
    Mutation("float", 1.5),
    Mutation("huge-float", 1.7e308),
    Mutation("negative", -1),
    Mutation("int-2**64", 2**64),
    Mutation("int-5000-digits", RAW, raw=HUGE_INT),
    Mutation("int-4000-digits", RAW, raw="9" * 4000),
    Mutation("nan", RAW, raw="NaN"),
    Mutation("infinity", RAW, raw="1e999"),
    Mutation("deep-nesting", RAW, raw="[" * 400 + "]" * 400),
    Mutation("deeper-nesting", RAW, raw="[" * 900 + "]" * 900),
    Mutation("markup-close", "[/x]"),
    Mutation("markup-style", "[bold red]x[/]"),
    Mutation("markup-pair", "[bold red]x[/bold red]"),
    Mutation("control-chars", "\x1b[31mred\x1b[0m\x07\r\nexit: pass\x9b2J"),
    Mutation("lone-surrogate", RAW, raw='"\\ud800x"'),
    Mutation("empty-list", []),
    Mutation("empty-dict", {}),
    Mutation("list-of-null", [None]),
    Mutation("dict-of-null", {"x": None}),
    Mutation("list-of-objects", [{"x": [1, {"y": "z"}]}]),
    Mutation("remove", remove=True),
)
COMPANION = make_report(fail_unit=None, hostname="node-companion", run_id="20250102T000000Z-beef")


def field_paths(doc: Any, prefix: Path_ = ()) -> Iterator[Path_]:
    """Every key and list element of `doc`; of a long list only the first and the last element."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*prefix, key)
            yield from field_paths(value, (*prefix, key))
    elif isinstance(doc, list):
        picks = sorted({0, len(doc) - 1}) if doc else []
        for i in picks:
            yield (*prefix, i)
            yield from field_paths(doc[i], (*prefix, i))


def mutated_text(base: dict[str, Any], path: Path_, mutation: Mutation) -> str:
    """The JSON text of `base` with the field at `path` spoiled by `mutation`."""
    doc = copy.deepcopy(base)
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if mutation.remove:
        del parent[last]
    else:
        parent[last] = copy.deepcopy(mutation.value)
    text = json.dumps(doc)
    if mutation.raw is not None:
        text = text.replace(json.dumps(RAW), mutation.raw)
    return text
