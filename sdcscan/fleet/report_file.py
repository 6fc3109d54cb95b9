"""One report file for `compare`: bytes (gunzipped, bounded) -> text -> the compact extract.

Gzip is recognised by its content, whatever the file is called, and its output is bounded while it is
produced (a gzip bomb stops at the limit). The bytes are hashed and decoded, then dropped before
parsing; a report larger than `STREAM_UNITS_ABOVE` is parsed one unit at a time (`_LargeReport`), so
its peak memory is about twice its size rather than the whole-document object tree (six to eight times).
A file that is not a usable report raises `ReportError` with the reason; the caller lists it as skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import zlib

from sdcscan.errors import ReportError
from sdcscan.files import JSONFileError, parse_json, read_bounded
from sdcscan.fleet.model import Extractor, HostReport, UnitRecord
from sdcscan.report import MAX_REPORT_BYTES

GZIP_MAGIC = b"\x1f\x8b"  # gzip is recognised by its content, whatever the file is called
MAX_DECOMPRESSED_BYTES = MAX_REPORT_BYTES  # a compressed report may not unpack to more than a plain one
STREAM_UNITS_ABOVE = 32 << 20  # characters of JSON text above which a report is parsed unit by unit


def read_report(path: str, extractor: Extractor) -> HostReport:
    """Read, decompress if gzip, parse and extract one report file.

    Raises:
        ReportError: the file is not a usable report; the message is the reason, without the path.
    """
    try:
        raw = report_bytes(path)
        sha = hashlib.sha256(raw).hexdigest()
        text = _utf8(raw)
        del raw  # the text is all that is needed now: never hold the bytes and the parsed tree together
        if len(text) > STREAM_UNITS_ABOVE:
            return _LargeReport(text, extractor, path, sha).extract()
        data = parse_json(text, what="report")
        del text
    except JSONFileError as err:
        raise ReportError(err.reason) from None
    if isinstance(data, dict) and "golden_version" in data:
        raise ReportError("a golden file, not a report")
    return _extract(extractor, data, path, sha)


def _extract(extractor: Extractor, data: object, path: str, sha: str) -> HostReport:
    """`Extractor.extract` with its one safety net.

    Raises:
        ReportError: validate_report refused the document, or (a bug in that check) extraction failed.
    """
    try:
        return extractor.extract(data, source=path, sha256=sha)
    except (KeyError, TypeError, AttributeError, ValueError, OverflowError) as err:
        # validate_report checks every field the extract reads, so this is a bug in that check; one bad
        # file must still not stop the comparison of a fleet. Its content is not echoed.
        raise ReportError(f"malformed report (unexpected {type(err).__name__})") from None


def report_bytes(path: str) -> bytes:
    """The bytes of a report file, gunzipped when they are gzip data; both sizes bounded.

    Raises:
        JSONFileError: unreadable, not a regular file, too large, corrupt gzip, or a gzip bomb.
    """
    raw = read_bounded(path, what="report", max_bytes=MAX_REPORT_BYTES)
    return gunzip(raw, MAX_DECOMPRESSED_BYTES) if raw[:2] == GZIP_MAGIC else raw


def gunzip(data: bytes, limit: int) -> bytes:
    """Decompress gzip data (every member, as `gzip` does), refusing more than `limit` bytes of output.

    The output is bounded while it is produced: a small file that unpacks to terabytes (a gzip bomb)
    stops at `limit` + 1 bytes.

    Raises:
        JSONFileError: corrupt or truncated gzip data, or more than `limit` bytes once decompressed.
    """
    out = bytearray()
    rest = data
    while rest:
        unpack = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip header and trailer
        try:
            out += unpack.decompress(rest, limit + 1 - len(out))
        except zlib.error:
            raise JSONFileError("", "corrupt gzip data (not a report)") from None
        if len(out) > limit:
            raise JSONFileError(
                "", f"decompresses to more than {limit} bytes, the limit for a report (a gzip bomb?)"
            )
        if not unpack.eof:
            raise JSONFileError("", "truncated gzip data")
        rest = unpack.unused_data
        if rest[:2] != GZIP_MAGIC:
            if rest.strip(b"\0"):  # gzip tolerates zero padding after the last member, nothing else
                raise JSONFileError("", "trailing garbage after the gzip data")
            break
    return bytes(out)


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise JSONFileError("", "not UTF-8 JSON text") from None


_WHITESPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
_UNIT_PATH = re.compile(r"^report: units\[0\]")


class _LargeReport:
    """A large report parsed one unit at a time: the object tree of one unit exists at a time, not all.

    The top-level object is walked key by key with the C decoder (`raw_decode`); the elements of
    `units` are only measured on this pass (their spans kept, their trees dropped). The other fields
    are validated and extracted with `units: []`. Then each unit is decoded again and extracted inside
    that top-level object, whose per-unit records (`findings`, `mismatches`, anything with a `unit`)
    are narrowed to this unit and host-level ones: the unit's extract sees what it would see in the
    whole document. Unit errors name `units[k]` as for the whole document. Anything that is not a plain
    object of keys goes to the whole-document parser, whose error messages are the rule.
    """

    def __init__(self, text: str, extractor: Extractor, source: str, sha: str) -> None:
        self.text, self.extractor, self.source, self.sha = text, extractor, source, sha
        self.spans: list[tuple[int, int, object]] = []  # (start, end, the unit's id) of each element of units

    def extract(self) -> HostReport:
        """Raises: ReportError or JSONFileError, as `read_report`."""
        try:
            top = self._top_level()
        except (ValueError, IndexError, RecursionError):  # not plain JSON of the expected shape
            top = None
        if top is None:
            return self._whole()
        if "golden_version" in top:
            raise ReportError("a golden file, not a report")
        base = _extract(self.extractor, top, self.source, self.sha)  # everything but the units
        records = _UnitRecords(top)
        units = [self._unit(k, records) for k in range(len(self.spans))]
        if len({u.unit for u in units}) != len(units):
            raise ReportError("report: a unit id appears twice")  # Extractor's words for the whole document
        return dataclasses.replace(base, units=tuple(sorted(units, key=lambda u: u.unit)))

    def _whole(self) -> HostReport:
        data = parse_json(self.text, what="report")
        if isinstance(data, dict) and "golden_version" in data:
            raise ReportError("a golden file, not a report")
        return _extract(self.extractor, data, self.source, self.sha)

    def _unit(self, k: int, records: _UnitRecords) -> UnitRecord:
        """Decode, validate and extract unit number `k` in its report's context; errors name `units[k]`."""
        start, _, uid = self.spans[k]
        unit, _ = _DECODER.raw_decode(self.text, start)
        doc = records.for_unit(uid)
        doc["units"] = [unit]
        try:
            return _extract(self.extractor, doc, self.source, self.sha).units[0]
        except ReportError as err:
            raise ReportError(_UNIT_PATH.sub(f"report: units[{k}]", str(err))) from None

    def _top_level(self) -> dict[str, object] | None:
        """The top-level object with `units: []` (their spans noted), or None to fall back."""
        text = self.text
        pos = self._skip(0)
        if text[pos] != "{":
            return None
        top: dict[str, object] = {}
        pos = self._skip(pos + 1)
        while text[pos] == '"':
            key, pos = _DECODER.raw_decode(text, pos)  # a JSON string: text[pos] is '"'
            pos = self._skip(pos)
            if text[pos] != ":":
                return None
            pos = self._skip(pos + 1)
            if key == "units" and text[pos] == "[":
                if "units" in top:
                    return None  # the key twice: the whole-document parser says what that means
                top["units"] = []
                pos = self._measure_units(pos + 1)
            else:
                top[key], pos = _DECODER.raw_decode(text, pos)
            pos = self._skip(pos)
            if text[pos] == ",":
                pos = self._skip(pos + 1)
            elif text[pos] == "}":
                return top if self._skip(pos + 1) == len(text) else None
            else:
                return None
        return None

    def _measure_units(self, pos: int) -> int:
        """Note the span and id of each element of the array at `pos`; return the index after `]`."""
        pos = self._skip(pos)
        if self.text[pos] == "]":
            return pos + 1
        while True:
            unit, end = _DECODER.raw_decode(self.text, pos)
            self.spans.append((pos, end, unit.get("id") if isinstance(unit, dict) else None))
            del unit
            pos = self._skip(end)
            if self.text[pos] == "]":
                return pos + 1
            if self.text[pos] != ",":
                raise ValueError("not a JSON array")
            pos = self._skip(pos + 1)

    def _skip(self, pos: int) -> int:
        match = _WHITESPACE.match(self.text, pos)
        assert match is not None  # the pattern matches the empty string
        return match.end()


class _UnitRecords:
    """The top-level object of a report, with its lists of per-unit records grouped by unit once.

    A list is per-unit when its elements are objects with a `unit` key (`findings`, `mismatches`);
    elements whose `unit` is not a string (null: a host-level finding) belong to every unit.
    """

    def __init__(self, top: dict[str, object]) -> None:
        self.top = top
        # key -> (its (position, record) pairs that belong to every unit, and those of each unit)
        self.grouped: dict[str, tuple[list[tuple[int, object]], dict[str, list[tuple[int, object]]]]] = {}
        for key, value in top.items():
            if isinstance(value, list) and any(isinstance(e, dict) and "unit" in e for e in value):
                common: list[tuple[int, object]] = []
                by_unit: dict[str, list[tuple[int, object]]] = {}
                for i, e in enumerate(value):
                    owner = e.get("unit") if isinstance(e, dict) else None
                    if isinstance(owner, str):
                        by_unit.setdefault(owner, []).append((i, e))
                    else:
                        common.append((i, e))
                self.grouped[key] = (common, by_unit)

    def for_unit(self, uid: object) -> dict[str, object]:
        """A copy of the top-level object whose per-unit lists hold only the records of `uid`, in order."""
        doc = dict(self.top)
        for key, (common, by_unit) in self.grouped.items():
            mine = by_unit.get(uid, []) if isinstance(uid, str) else []
            doc[key] = [e for _, e in sorted([*common, *mine], key=lambda p: p[0])]
        return doc
