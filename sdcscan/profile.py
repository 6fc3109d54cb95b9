"""Profiles: YAML files that say which workloads to run, with which parameters, for how long.

Loading is strict: unknown keys, wrong types and out-of-range values raise `ProfileError` naming the
file and the key, because a typo in a fleet-wide profile must not silently change what is tested.
Precedence: built-in default < profile < command-line flag.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sdcscan.errors import ProfileError, UsageError
from sdcscan.timefmt import parse_duration
from sdcscan.workloads import spec as workload_spec

PROFILE_VERSION = 1


def _builtin_dir() -> Path:
    """Installed, the built-in profiles are the package `sdcscan.profiles` (the repository's profiles/);
    run from a source checkout without installing, they are ../profiles."""
    spec = importlib.util.find_spec("sdcscan.profiles")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[1] / "profiles"


BUILTIN_DIR = _builtin_dir()
MAX_PROFILE_BYTES = 256 * 1024
MAX_BUDGET_S = 30 * 24 * 3600.0
MAX_RETEST = 128


def parse_budget(text: str | float | int) -> float:
    """A run budget (`90s`, `15m`, `2h`, `1h30m` or plain seconds) in seconds, at most MAX_BUDGET_S.

    Raises:
        UsageError: the text is not a positive duration of at most 30 days.
    """
    return parse_duration(text, max_s=MAX_BUDGET_S)


@dataclass(frozen=True)
class WorkloadEntry:
    """One entry of a profile's `workloads` list: a workload's name, its share of cases, its parameters."""

    name: str
    weight: int = 1
    params: Mapping[str, Any] = field(default_factory=dict)
    cuda_params: Mapping[str, Any] = field(default_factory=dict)

    def params_for(self, device_kind: str) -> dict[str, Any]:
        """Parameters for a unit of this kind: `cuda_params` override `params` on GPUs."""
        merged = dict(self.params)
        if device_kind == "cuda":
            merged.update(self.cuda_params)
        return merged


@dataclass(frozen=True)
class Profile:
    """A validated profile. `sha256` identifies the plan it produces (workloads and parameters)."""

    name: str
    path: str
    description: str
    budget_s: float
    seed: int | None
    threads_per_unit: int
    units: str
    retest: int
    workloads: tuple[WorkloadEntry, ...]
    sha256: str

    def select(self, names: list[str]) -> Profile:
        """This profile restricted to `names` (in profile order); unknown names raise UsageError."""
        known = {w.name for w in self.workloads}
        for n in names:
            workload_spec(n)  # raises with a did-you-mean for names no workload has
            if n not in known:
                raise UsageError(
                    f"workload {n!r} is not in profile {self.name!r} (it has: {', '.join(sorted(known))})"
                )
        kept = tuple(w for w in self.workloads if w.name in names)
        return _with_workloads(self, kept)


_TOP_KEYS = {
    "version",
    "name",
    "description",
    "budget",
    "seed",
    "threads_per_unit",
    "units",
    "retest",
    "workloads",
}
_WORKLOAD_KEYS = {"name", "weight", "params", "cuda_params"}


class _StrictLoader(yaml.SafeLoader):
    """safe_load without aliases (no anchor bombs) and without duplicate keys."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(f"YAML aliases are not allowed (line {event.start_mark.line + 1})")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(
                key, str | int | float | bool | None
            ):  # `? [a, b]` keys: unhashable, never ours
                raise yaml.YAMLError(
                    f"mapping keys must be plain values (line {key_node.start_mark.line + 1})"
                )
            if key in seen:
                raise yaml.YAMLError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def resolve_profile_path(name_or_path: str) -> Path:
    """A built-in profile name (`quick`) or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path or candidate.exists():
        if not candidate.is_file():
            raise ProfileError(f"{name_or_path}: profile file not found")
        return candidate
    builtin = BUILTIN_DIR / f"{name_or_path}.yaml"
    if not builtin.is_file():
        raise ProfileError(
            f"{name_or_path}: no such profile (built-in: {', '.join(builtin_profile_names())}; or give a path)"
        )
    return builtin


def builtin_profile_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> Profile:
    """Load and validate a profile by built-in name or path.

    Raises:
        ProfileError: unreadable file, bad YAML, unknown key, wrong type or value; the message names both.
    """
    path = resolve_profile_path(name_or_path)
    label = path.name if path.parent == BUILTIN_DIR else str(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ProfileError(f"{label}: cannot read: {err.strerror or err}") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{label}: file is {len(raw)} bytes; profiles are at most {MAX_PROFILE_BYTES}")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_StrictLoader)
    except UnicodeDecodeError:
        raise ProfileError(f"{label}: not UTF-8 text") from None
    except yaml.YAMLError as err:
        raise ProfileError(f"{label}: invalid YAML: {_one_line(err)}") from None
    except RecursionError:  # PyYAML parses nested collections recursively
        raise ProfileError(f"{label}: invalid YAML: nested too deeply") from None
    except (ValueError, OverflowError) as err:  # a scalar PyYAML cannot convert, e.g. a 5000-digit integer
        raise ProfileError(f"{label}: invalid YAML value: {_one_line(err)}") from None
    return profile_from_data(data, label=label, default_name=path.stem)


def profile_from_data(data: Any, *, label: str, default_name: str) -> Profile:
    """Validate parsed YAML into a Profile (exposed for tests and fuzzing)."""
    if not isinstance(data, dict):
        raise ProfileError(f"{label}: expected a mapping at the top level, got {_type(data)}")
    _reject_unknown(label, "", data, _TOP_KEYS)
    version = data.get("version")
    if version != PROFILE_VERSION or isinstance(version, bool):
        raise ProfileError(f"{label}: version: expected {PROFILE_VERSION}, got {version!r}")
    name = _get(label, data, "name", str, default_name)
    description = _get(label, data, "description", str, "")
    try:
        budget_s = parse_budget(data.get("budget", "60s"))
    except UsageError as err:
        raise ProfileError(f"{label}: budget: {err}") from None
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
        raise ProfileError(f"{label}: seed: expected an integer in [0, 2^63) or null, got {seed!r}")
    threads = _get(label, data, "threads_per_unit", int, 1)
    if not 1 <= threads <= 1024:
        raise ProfileError(f"{label}: threads_per_unit: expected 1..1024, got {threads}")
    units = _get(label, data, "units", str, "all")
    retest = _get(label, data, "retest", int, 3)
    if not 0 <= retest <= MAX_RETEST:
        raise ProfileError(f"{label}: retest: expected 0..{MAX_RETEST}, got {retest}")
    workloads = _workloads(label, data.get("workloads"))
    probe = Profile(name, label, description, budget_s, seed, threads, units, retest, (), "")
    return _with_workloads(probe, workloads)


def _with_workloads(profile: Profile, workloads: tuple[WorkloadEntry, ...]) -> Profile:
    plan_content = [
        {"name": w.name, "weight": w.weight, "params": dict(w.params), "cuda_params": dict(w.cuda_params)}
        for w in workloads
    ]
    digest = hashlib.sha256(
        json.dumps({"version": PROFILE_VERSION, "workloads": plan_content}, sort_keys=True).encode()
    ).hexdigest()
    return Profile(
        profile.name,
        profile.path,
        profile.description,
        profile.budget_s,
        profile.seed,
        profile.threads_per_unit,
        profile.units,
        profile.retest,
        workloads,
        digest,
    )


def _workloads(label: str, entries: Any) -> tuple[WorkloadEntry, ...]:
    if not isinstance(entries, list) or not entries:
        raise ProfileError(f"{label}: workloads: expected a non-empty list, got {_type(entries)}")
    found, seen = [], set()
    for i, entry in enumerate(entries):
        where = f"workloads[{i}]"
        if not isinstance(entry, dict):
            raise ProfileError(f"{label}: {where}: expected a mapping, got {_type(entry)}")
        _reject_unknown(label, f"{where}.", entry, _WORKLOAD_KEYS)
        name = entry.get("name")
        if not isinstance(name, str):
            raise ProfileError(f"{label}: {where}.name: expected a workload name, got {name!r}")
        try:
            defaults = workload_spec(name).defaults
        except UsageError as err:
            raise ProfileError(f"{label}: {where}.name: {err}") from None
        if name in seen:
            raise ProfileError(f"{label}: {where}.name: workload {name!r} listed twice")
        seen.add(name)
        weight = _get(label, entry, "weight", int, 1, where=f"{where}.")
        if not 1 <= weight <= 1000:
            raise ProfileError(f"{label}: {where}.weight: expected 1..1000, got {weight}")
        params = _params(label, f"{where}.params", entry.get("params", {}), defaults)
        cuda_params = _params(label, f"{where}.cuda_params", entry.get("cuda_params", {}), defaults)
        found.append(WorkloadEntry(name, weight, params, cuda_params))
    return tuple(found)


def _params(label: str, where: str, given: Any, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Check given parameters against the workload's defaults: known keys, same types."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ProfileError(f"{label}: {where}: expected a mapping, got {_type(given)}")
    _reject_unknown(label, f"{where}.", given, set(defaults))
    out = {}
    for key, value in given.items():
        expected = defaults[key]
        if not _same_kind(value, expected):
            raise ProfileError(f"{label}: {where}.{key}: expected {_type(expected)}, got {value!r}")
        if (
            isinstance(value, int | float) and not isinstance(value, bool) and not abs(value) <= 1e9
        ):  # also NaN
            raise ProfileError(f"{label}: {where}.{key}: value {value!r} is out of range")
        out[key] = value
    return out


def _same_kind(value: Any, expected: Any) -> bool:
    if isinstance(expected, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(expected, bool)
    if isinstance(expected, float):
        return isinstance(value, int | float)
    if isinstance(expected, list | tuple):
        return (
            isinstance(value, list) and all(_same_kind(v, expected[0]) for v in value) if expected else True
        )
    return isinstance(value, type(expected))


def _get(label: str, data: dict[str, Any], key: str, kind: type, default: Any, where: str = "") -> Any:
    value = data.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProfileError(f"{label}: {where}{key}: expected {kind.__name__}, got {value!r}")
    return value


def _reject_unknown(label: str, where: str, data: dict[str, Any], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            hint = ", ".join(sorted(allowed)) or "none"
            raise ProfileError(f"{label}: {where}{key}: unknown key (allowed: {hint})")


def _type(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())
