"""Profiles: YAML files that say which workloads to run, with which parameters, for how long.

Loading is strict: unknown keys, wrong types and out-of-range values raise `ProfileError` naming the
file and the key, because a typo in a fleet-wide profile must not silently change what is tested.
Every workload parameter is checked against its range in the catalogue (`sdcscan.workloads.SPECS`) as
the units will get it (defaults < params < cuda_params on GPUs < command line), so a value that would
break a workload is exit 2 at load, never a failure in every worker after the run started.
Precedence: built-in default < profile < command-line flag.

Messages never quote a file's text beyond a short value: `-p` may name any file (a password database
parses as YAML whose keys are whole lines), so keys that are no identifiers and PyYAML's snippets are
left out, and values are cut to a few dozen characters.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import yaml

from sdcscan.errors import ProfileError, UsageError
from sdcscan.files import JSONFileError, read_bounded
from sdcscan.timefmt import parse_duration
from sdcscan.units import CPU_CLASSES, parse_units_spec
from sdcscan.workloads import SPECS, WorkloadSpec
from sdcscan.workloads import spec as workload_spec
from sdcscan.workloads.params import shown

_Value = TypeVar("_Value")  # what `_get` reads: the type it was asked for

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
    params: Mapping[str, object] = field(default_factory=dict)
    cuda_params: Mapping[str, object] = field(default_factory=dict)
    # {CPU class: parameters} for CPUs of that class and every slower one (`units.CPU_CLASSES`)
    class_params: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    def params_for(self, device_kind: str, unit_class: str | None = None) -> dict[str, object]:
        """Parameters for a unit of this kind and class: `cuda_params` override `params` on GPUs; on a
        CPU, each `class_params` entry for its class or a faster one does, the slowest entry last.

        So `class_params: {avx2: {repeats: [...]}}` shrinks the cases of AVX2 and baseline units, and a
        unit whose class is unknown (`unit_class` None) gets `params` alone.
        """
        merged = dict(self.params)
        if device_kind == "cuda":
            merged.update(self.cuda_params)
        elif unit_class in CPU_CLASSES:
            mine = CPU_CLASSES.index(unit_class)
            for faster in reversed(CPU_CLASSES[mine:]):
                merged.update(self.class_params.get(faster, {}))
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
    background: bool = False  # Ripple mode (`run --background`): idle priority, paced to the host's load

    def adding(self, names: list[str]) -> Profile:
        """This profile with the named workloads it lacks appended, at their defaults (a new plan)."""
        have = {w.name for w in self.workloads}
        extra = tuple(WorkloadEntry(n) for n in names if n not in have)
        return _with_workloads(self, self.workloads + extra) if extra else self

    def select(self, names: list[str]) -> Profile:
        """This profile restricted to `names` (in profile order).

        Raises:
            UsageError: `names` is empty (an empty selection must not run nothing, or mean all), or
                names a workload that does not exist or is not in this profile.
        """
        known = {w.name for w in self.workloads}
        if not names:
            raise UsageError(
                f"--workloads names no workload (profile {self.name!r} has: {', '.join(sorted(known))})"
            )
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
    "background",
}
_WORKLOAD_KEYS = {"name", "weight", "params", "cuda_params", "class_params"}


class _Refused(yaml.YAMLError):
    """The strict loader's own refusals: their messages quote nothing but a key (see `_key`)."""


class _StrictLoader(yaml.SafeLoader):
    """safe_load without aliases (no anchor bombs) and without duplicate keys."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML leaves it unannotated
            raise _Refused(f"YAML aliases are not allowed (line {event.start_mark.line + 1})")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, object]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(
                key, str | int | float | bool | None
            ):  # `? [a, b]` keys: unhashable, never ours
                raise _Refused(f"mapping keys must be plain values (line {key_node.start_mark.line + 1})")
            if key in seen:
                raise _Refused(f"duplicate key {_key(key)} (line {key_node.start_mark.line + 1})")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def resolve_profile_path(name_or_path: str) -> Path:
    """A built-in profile name (`quick`) or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path or candidate.exists():
        if not candidate.exists():
            raise ProfileError(f"{name_or_path}: profile file not found")
        return candidate  # `_read` refuses what is not a regular file, from the open descriptor
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
        text = _read(path, label).decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileError(f"{label}: not UTF-8 text, so not a profile") from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as err:
        raise ProfileError(f"{label}: invalid YAML: {_yaml_problem(err, text)}") from None
    except RecursionError:  # PyYAML parses nested collections recursively
        raise ProfileError(f"{label}: invalid YAML: nested too deeply") from None
    except (ValueError, OverflowError):  # a scalar PyYAML cannot convert, e.g. a 5000-digit integer
        raise ProfileError(f"{label}: invalid YAML value: a number too long or a date out of range") from None
    return profile_from_data(data, label=label, default_name=path.stem)


def _read(path: Path, label: str) -> bytes:
    """The bytes of a profile: a regular file of at most MAX_PROFILE_BYTES (a FIFO or device is never read).

    Raises:
        ProfileError: cannot open or read it, not a regular file, or too large.
    """
    try:
        return read_bounded(path, what="profile", max_bytes=MAX_PROFILE_BYTES)
    except JSONFileError as err:
        raise ProfileError(f"{label}: {err.reason}") from None


# PyYAML quotes the characters it stumbled on; of those, only tokens and punctuation are kept.
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_HARMLESS = re.compile(r"['\"](<[a-z ]+>|[^\w\s])['\"]")


def _yaml_problem(err: yaml.YAMLError, text: str) -> str:
    """What PyYAML found wrong and where (line, column), without the snippet of the file it would quote."""
    if isinstance(err, _Refused):
        return str(err)
    if isinstance(err, yaml.reader.ReaderError):  # a control character: no mark, only an offset
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        return f"a character YAML does not allow (line {line}, column {column})"
    if isinstance(err, yaml.MarkedYAMLError):
        what = _QUOTED.sub(
            lambda m: m[0] if _HARMLESS.fullmatch(m[0]) else "…", err.problem or err.context or ""
        )
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{' '.join(what.split()) or 'not YAML'}{where}"
    return "not YAML"


def profile_from_data(data: object, *, label: str, default_name: str) -> Profile:
    """Validate parsed YAML into a Profile (exposed for tests and fuzzing)."""
    if not isinstance(data, dict):
        raise ProfileError(f"{label}: expected a mapping at the top level, got {_type(data)}")
    _reject_unknown(label, "", data, _TOP_KEYS)
    version = data.get("version")
    if version != PROFILE_VERSION or isinstance(version, bool):
        raise ProfileError(f"{label}: version: expected {PROFILE_VERSION}, got {shown(version)}")
    name = _get(label, data, "name", str, default_name)
    description = _get(label, data, "description", str, "")
    budget = data.get("budget", "60s")
    try:
        budget_s = parse_budget(budget)
    except UsageError:
        raise ProfileError(
            f"{label}: budget: expected a duration such as 90s, 15m or 2h, at most 30 days, got {shown(budget)}"
        ) from None
    seed = data.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
        raise ProfileError(f"{label}: seed: expected an integer in [0, 2^63) or null, got {shown(seed)}")
    threads = _get(label, data, "threads_per_unit", int, 1)
    if not 1 <= threads <= 1024:
        raise ProfileError(f"{label}: threads_per_unit: expected 1..1024, got {shown(threads)}")
    units = _get(label, data, "units", str, "all")
    _check_units(label, units)
    retest = _get(label, data, "retest", int, 3)
    if not 0 <= retest <= MAX_RETEST:
        raise ProfileError(f"{label}: retest: expected 0..{MAX_RETEST}, got {shown(retest)}")
    workloads = _workloads(label, data.get("workloads"))
    background = _get(label, data, "background", bool, False)
    probe = Profile(name, label, description, budget_s, seed, threads, units, retest, (), "", background)
    return _with_workloads(probe, workloads)


_UNIT_NAME = re.compile(r"all|cpu|cuda|(cpu|cuda):[0-9]{1,6}")


def _check_units(label: str, units: str) -> None:
    """The profile's unit selection names at least one unit, each of the forms `sdcscan run --units` takes.

    Whether the units exist is for the host that runs the profile to say; the form is checked here.
    """
    try:
        parts = parse_units_spec(units, what="units")
    except UsageError as err:
        raise ProfileError(f"{label}: {err}") from None
    for part in parts:
        if not _UNIT_NAME.fullmatch(part):
            raise ProfileError(f"{label}: units: expected all, cpu, cuda, cpu:N or cuda:N, got {shown(part)}")


def _with_workloads(profile: Profile, workloads: tuple[WorkloadEntry, ...]) -> Profile:
    plan_content = [
        {"name": w.name, "weight": w.weight, "params": dict(w.params), "cuda_params": dict(w.cuda_params)}
        # Only a profile with class layers hashes them: the plans of the others keep their hashes.
        | ({"class_params": {k: dict(v) for k, v in w.class_params.items()}} if w.class_params else {})
        # A workload whose cases now compute other data (SPECS[...].data_version) makes another plan,
        # so digests recorded before (goldens) are never compared with the new ones. Version 1 adds
        # nothing: the plans of unchanged workloads keep their hashes.
        | ({"data_version": SPECS[w.name].data_version} if SPECS[w.name].data_version > 1 else {})
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
        profile.background,
    )


def _workloads(label: str, entries: object) -> tuple[WorkloadEntry, ...]:
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
            raise ProfileError(f"{label}: {where}.name: expected a workload name, got {shown(name)}")
        try:
            spec = workload_spec(name)
        except UsageError as err:
            raise ProfileError(f"{label}: {where}.name: {err}") from None
        if name in seen:
            raise ProfileError(f"{label}: {where}.name: workload {name!r} listed twice")
        seen.add(name)
        weight = _get(label, entry, "weight", int, 1, where=f"{where}.")
        if not 1 <= weight <= 1000:
            raise ProfileError(f"{label}: {where}.weight: expected 1..1000, got {shown(weight)}")
        params = _params(label, f"{where}.params", spec, entry.get("params", {}))
        cuda_params = _params(label, f"{where}.cuda_params", spec, entry.get("cuda_params", {}))
        class_params = _class_params(label, f"{where}.class_params", spec, entry.get("class_params", {}))
        workload = WorkloadEntry(name, weight, params, cuda_params, class_params)
        problem = _merged_problem(spec, workload, {})
        if problem:
            layer, key, text = problem
            raise ProfileError(f"{label}: {where}.{layer}.{key} ({name}): {text}")
        found.append(workload)
    return tuple(found)


def _class_params(label: str, where: str, spec: WorkloadSpec, given: object) -> dict[str, dict[str, object]]:
    """`class_params`: a mapping from CPU classes (`units.CPU_CLASSES`) to parameters, each checked."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ProfileError(f"{label}: {where}: expected a mapping of CPU classes, got {_type(given)}")
    found = {}
    for key, params in given.items():
        if key not in CPU_CLASSES:
            raise ProfileError(
                f"{label}: {where}: expected CPU classes ({', '.join(CPU_CLASSES)}), got {_key(key)}"
            )
        found[key] = _params(label, f"{where}.{key}", spec, params)
    return found


def _params(label: str, where: str, spec: WorkloadSpec, given: object) -> dict[str, object]:
    """Check given parameters against the workload's catalogue entry: known keys, values in range.

    Raises:
        ProfileError: `{label}: {where}.{key} ({workload}): must be ... (got ...)`.
    """
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ProfileError(f"{label}: {where}: expected a mapping, got {_type(given)}")
    _reject_unknown(label, f"{where}.", given, set(spec.params))
    for key, value in given.items():
        problem = spec.param_problem(key, value)
        if problem:
            raise ProfileError(f"{label}: {where}.{key} ({spec.name}): {problem}")
    return dict(given)


def _merged_problem(
    spec: WorkloadSpec, entry: WorkloadEntry, overrides: Mapping[str, object]
) -> tuple[str, str, str] | None:
    """(layer, key, problem) for the first cross-parameter rule the parameters of a CPU or a GPU unit break.

    Each value was checked alone already; a rule needs them merged as the worker merges them, e.g. a
    profile that sets `dtypes` alone leaves the default `repeats` one entry per default dtype.
    """
    layers: list[tuple[str, str | None, str]] = [("cpu", None, "params"), ("cuda", None, "cuda_params")]
    layers += [("cpu", cls, f"class_params.{cls}") for cls in entry.class_params]
    for kind, cls, layer in layers:
        found = spec.rules_problem({**spec.defaults, **entry.params_for(kind, cls), **overrides})
        if found:
            return (layer, *found)
    return None


def check_overrides(profile: Profile, overrides: Mapping[str, Mapping[str, object]], *, source: str) -> None:
    """Check command-line parameter overrides ({workload: {key: value}}) as a profile's parameters are.

    Each value against its range (a calibration path: the file is read and checked), then the merged
    parameters of every workload of the profile the overrides touch.

    Raises:
        UsageError: `{source}: ...` naming the workload and key, e.g. `--calibration: calibration table
            cal.json: no such file`.
    """
    for name, values in overrides.items():
        spec = workload_spec(name)
        for key, value in values.items():
            if key not in spec.params:
                raise UsageError(f"{source}: {name} has no parameter {key!r}")
            problem = spec.param_problem(key, value)
            if problem:
                raise UsageError(f"{source}: {problem}")
    for entry in profile.workloads:
        if entry.name in overrides:
            found = _merged_problem(workload_spec(entry.name), entry, overrides[entry.name])
            if found:
                _, key, problem = found
                raise UsageError(f"{source}: {entry.name}.{key}: {problem} (with profile {profile.name!r})")


def _get(
    label: str, data: Mapping[object, object], key: str, kind: type[_Value], default: _Value, where: str = ""
) -> _Value:
    value = data.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProfileError(f"{label}: {where}{key}: expected {_type(kind())}, got {shown(value)}")
    return value


def _reject_unknown(label: str, where: str, data: Mapping[object, object], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            hint = ", ".join(sorted(allowed)) or "none"
            raise ProfileError(f"{label}: {where}{_key(key)}: unknown key (allowed: {hint})")


_PLAIN_KEY = re.compile(r"[\w .-]{1,40}")


def _key(key: object) -> str:
    """A key for a message: itself when it reads like one, else only its length.

    A file that is no profile can still parse as a mapping whose keys are whole lines (`/etc/shadow`:
    `root:$6$...:19000:0:::` ends in a colon), and those lines must not reach a terminal or a log.
    """
    text = str(key)
    return text if _PLAIN_KEY.fullmatch(text) else f"<a key of {len(text)} characters>"


def _type(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )
