"""Reading the declaration in `sdcscan.report.document` at run time: the fields of each object and
what their annotations say. The validator and the schema generator both walk the declaration
through this module, so they cannot read it differently.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass

from typing_extensions import NotRequired, Required, is_typeddict

from sdcscan.report.document import UNCHECKED, WRITTEN, Doc, Pattern, Range

__all__ = ["Declared", "Field", "declared", "fields_of"]


@dataclass(frozen=True)
class Declared:
    """An annotation taken apart: the type without markers, and the markers it carried."""

    base: object
    range: Range | None = None
    pattern: str | None = None
    doc: str | None = None
    written: bool = False
    unchecked: bool = False

    @property
    def origin(self) -> object:
        return typing.get_origin(self.base)

    @property
    def args(self) -> tuple[object, ...]:
        return typing.get_args(self.base)

    @property
    def nullable(self) -> bool:
        """`X | None`: the value may be null."""
        return self.origin in (typing.Union, types.UnionType) and type(None) in self.args

    def without_null(self) -> Declared:
        """The shape of a nullable field's non-null value (markers kept)."""
        rest = tuple(a for a in self.args if a is not type(None))
        base = rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007 (built at run time)
        return Declared(base, self.range, self.pattern, self.doc, self.written, self.unchecked)

    @property
    def is_object(self) -> bool:
        """A declared object (a TypedDict of the document)."""
        return is_typeddict(self.base)


@dataclass(frozen=True)
class Field:
    """One key of a declared object."""

    name: str
    declared: Declared
    required: bool  # readers may rely on it being present


def declared(annotation: object) -> Declared:
    """Take `Annotated[...]`, `NotRequired[...]` and `Required[...]` apart."""
    markers: list[object] = []
    while True:
        origin = typing.get_origin(annotation)
        if origin in (NotRequired, Required):
            annotation = typing.get_args(annotation)[0]
        elif origin is typing.Annotated:
            markers.extend(annotation.__metadata__)  # type: ignore[attr-defined]
            annotation = typing.get_args(annotation)[0]
        else:
            break
    return Declared(
        base=annotation,
        range=next((m for m in markers if isinstance(m, Range)), None),
        pattern=next((m.regex for m in markers if isinstance(m, Pattern)), None),
        doc=next((m.text for m in markers if isinstance(m, Doc)), None),
        written=WRITTEN in markers,
        unchecked=UNCHECKED in markers,
    )


@functools.cache
def fields_of(cls: type) -> tuple[Field, ...]:
    """The declared keys of a TypedDict, in declaration order.

    Required-ness is read from the annotations rather than `__required_keys__`, which postponed
    annotations (`from __future__ import annotations`) leave wrong on Python < 3.14.
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    total = getattr(cls, "__total__", True)
    out = []
    for name, annotation in hints.items():
        origin = typing.get_origin(annotation)
        required = origin is Required or (total and origin is not NotRequired)
        out.append(Field(name, declared(annotation), required))
    return tuple(out)
