"""The physical part behind a unit (issue 45): read from a fake sysfs and a fake NVML, carried into the
report and named in a failing unit's finding."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sdcscan import parts
from sdcscan.errors import ReportError
from sdcscan.judgement.assemble import judge_and_build
from sdcscan.report import validate_report
from tests.helpers.reports import make_report

CPUINFO = "processor\t: 0\nmicrocode\t: 0x2b000590\n\nprocessor\t: 5\nmicrocode\t: 0x2b000591\n"


def _cpu(root: Path, cpu: int, **files: str) -> None:
    topology = root / f"cpu{cpu}" / "topology"
    topology.mkdir(parents=True)
    for name, text in files.items():
        (topology / name).write_text(text + "\n")


def test_a_cpu_part_is_its_socket_core_siblings_microcode_and_ppin(tmp_path: Path) -> None:
    _cpu(
        tmp_path,
        5,
        physical_package_id="1",
        core_id="12",
        thread_siblings_list="5,69",
        ppin="0x8e3c0a19b2d4f601",
    )
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    part = parts.cpu_part(5, sysfs=tmp_path, cpuinfo=tmp_path / "cpuinfo")
    assert part == {"socket": 1, "core": 12, "smt_siblings": [5, 69], "microcode": "0x2b000591",
                    "ppin": "0x8e3c0a19b2d4f601"}  # fmt: skip
    assert parts.describe("cpu", part) == (
        "CPU socket 1, physical core 12, logical CPUs 5,69, PPIN 0x8e3c0a19b2d4f601, microcode 0x2b000591"
    )


def test_what_the_host_does_not_give_is_left_out(tmp_path: Path) -> None:
    """No PPIN file (not root, or a kernel before 6.4), a PPIN of 0 (not enabled), no cpuinfo: only the
    topology; a CPU with no topology at all: nothing, and nothing to describe."""
    _cpu(tmp_path, 0, physical_package_id="0", core_id="0", thread_siblings_list="0-1")
    assert parts.cpu_part(0, sysfs=tmp_path, cpuinfo=tmp_path / "absent") == {
        "socket": 0, "core": 0, "smt_siblings": [0, 1]}  # fmt: skip
    _cpu(tmp_path, 1, ppin="0x0", core_id="garbage")
    assert parts.cpu_part(1, sysfs=tmp_path, cpuinfo=tmp_path / "absent") == {}
    assert parts.cpu_part(7, sysfs=tmp_path, cpuinfo=tmp_path / "absent") == {}
    assert parts.describe("cpu", {}) == "" and parts.describe("cuda", {}) == ""


def test_the_microcode_file_wins_over_cpuinfo(tmp_path: Path) -> None:
    _cpu(tmp_path, 0, core_id="0")
    (tmp_path / "cpu0" / "microcode").mkdir()
    (tmp_path / "cpu0" / "microcode" / "version").write_text("0x2b0005a0\n")
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    assert parts.cpu_part(0, sysfs=tmp_path, cpuinfo=tmp_path / "cpuinfo")["microcode"] == "0x2b0005a0"


@pytest.mark.parametrize(("text", "cpus"), [("0-3,8,10-11", [0, 1, 2, 3, 8, 10, 11]), ("7", [7]), ("", [])])
def test_the_kernels_cpu_lists(text: str, cpus: list[int]) -> None:
    assert parts.cpu_list(text) == cpus


class NVMLError(Exception):
    pass


def fake_nvml(boards: dict[str, dict[str, Any]], *, init_fails: bool = False) -> Any:
    """pynvml's shape: handles found by PCI bus id, strings as bytes (old pynvml) or str, a query the
    board does not support raising."""
    calls: list[str] = []

    def field(name: str) -> Any:
        def query(handle: str) -> Any:
            value = boards[handle].get(name)
            if value is None:
                raise NVMLError("Not Supported")
            return value

        return query

    def by_pci(bus: str) -> str:
        if bus not in boards:
            raise NVMLError("Not Found")
        return bus

    def init() -> None:
        calls.append("init")
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    return SimpleNamespace(
        calls=calls,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByPciBusId=by_pci,
        nvmlDeviceGetUUID=field("uuid"),
        nvmlDeviceGetSerial=field("serial"),
        nvmlDeviceGetVbiosVersion=field("vbios"),
        nvmlDeviceGetBoardPartNumber=field("board_part"),
    )


BOARDS = {
    "0000:3b:00.0": {"uuid": "GPU-5c0f8d1e-aa", "serial": b"1321021048217\x00", "vbios": "96.00.74.00.01",
                     "board_part": "692-2G520-0200-000"},
    "0000:86:00.0": {"uuid": "GPU-77b2", "serial": None, "vbios": "96.00.74.00.02", "board_part": None},
}  # fmt: skip


def test_gpus_are_found_by_their_pci_bus_ids_in_one_nvml_session() -> None:
    """CUDA's order (here the reverse of NVML's) never matters: each board is found by its bus id."""
    nvml = fake_nvml(BOARDS)
    first, second = parts.gpu_parts(["0000:86:00.0", "0000:3b:00.0"], nvml=nvml)
    assert second == {"pci": "0000:3b:00.0", "uuid": "GPU-5c0f8d1e-aa", "serial": "1321021048217",
                      "vbios": "96.00.74.00.01", "board_part": "692-2G520-0200-000"}  # fmt: skip
    assert first == {"pci": "0000:86:00.0", "uuid": "GPU-77b2", "vbios": "96.00.74.00.02"}  # no serial
    assert parts.describe("cuda", second) == (
        "GPU serial 1321021048217, UUID GPU-5c0f8d1e-aa, PCI 0000:3b:00.0, VBIOS 96.00.74.00.01"
    )
    assert nvml.calls == ["init", "shutdown"]  # NVML counts its users: one init, paired


def test_a_gpu_without_a_bus_id_or_unknown_to_nvml_gets_no_guess() -> None:
    """Guessing a board by index could send the wrong part back: no bus id, no NVML fields."""
    assert parts.gpu_parts([None, "0000:99:00.0"], nvml=fake_nvml(BOARDS)) == [{}, {"pci": "0000:99:00.0"}]


def test_without_nvml_only_the_bus_id_torch_gave_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parts.gpu_parts(["0000:3b:00.0"], nvml=fake_nvml(BOARDS, init_fails=True)) == [
        {"pci": "0000:3b:00.0"}
    ]
    monkeypatch.setattr(parts, "_import_nvml", lambda: None)
    assert parts.gpu_parts(["0000:3b:00.0"]) == [{"pci": "0000:3b:00.0"}]


def test_parts_of_a_hosts_units_keep_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts, "_import_nvml", lambda: fake_nvml(BOARDS))
    found = parts.parts_of(
        [("cpu", 0, None), ("cuda", 0, "0000:86:00.0"), ("cpu", 1, None), ("cuda", 1, "0000:3b:00.0")]
    )
    assert [p.get("uuid") for p in found] == [None, "GPU-77b2", None, "GPU-5c0f8d1e-aa"]
    assert found[0] == parts.cpu_part(0) and found[2] == parts.cpu_part(1)


def _report(part: dict[str, Any]) -> dict[str, Any]:
    """cpu:1 miscomputes case 3 where cpu:0 did not: it fails; `part` is cpu:1's."""
    whole = make_report()  # a complete run and host, as the validator wants them
    units: Any = [{"id": f"cpu:{i}", "kind": "cpu", "model": "m", "cohort": "c", "notes": []} for i in (0, 1)]
    units[1]["part"] = part
    outcomes: Any = [
        {"unit": f"cpu:{i}", "index": n, "attempt": 0, "workload": "gemm_int8", "digest": "d", "seconds": 0.1,
         "status": "mismatch" if (i, n) == (1, 3) else "ok", "ops": 1.0, "ops_unit": "op", "mismatches": []}
        for i in (0, 1) for n in range(6)
    ]  # fmt: skip
    return judge_and_build(run=whole["run"], host=whole["host"], software={}, cohorts={"c": {}}, units=units,
                           outcomes=outcomes, problems={}, interrupted=None)  # fmt: skip


def test_a_failing_units_finding_names_the_part_to_replace() -> None:
    part = {"socket": 0, "core": 3, "smt_siblings": [1, 3], "microcode": "0x2b000590"}
    report = _report(part)
    by_id = {u["id"]: u for u in report["units"]}
    assert by_id["cpu:1"]["verdict"] == "fail" and by_id["cpu:1"]["part"] == part
    assert "part" not in by_id["cpu:0"]
    (fail,) = [f for f in report["findings"] if f["unit"] == "cpu:1" and f["kind"] == "invariant"]
    assert fail["next"].endswith(
        "the part to replace: CPU socket 0, physical core 3, logical CPUs 1,3, microcode 0x2b000590)"
    )
    validate_report(report)  # the document declares `part`


def test_a_finding_without_a_known_part_says_nothing_of_one() -> None:
    (fail,) = [f for f in _report({})["findings"] if f["unit"] == "cpu:1" and f["kind"] == "invariant"]
    assert "part to replace" not in fail["next"]


@pytest.mark.parametrize(
    ("field", "value"), [("socket", "0"), ("socket", -1), ("smt_siblings", [None]), ("serial", 7)]
)
def test_a_part_of_the_wrong_shape_is_refused_by_the_validator(field: str, value: object) -> None:
    report = _report({"socket": 0})
    report["units"][1]["part"] = {field: value}
    with pytest.raises(ReportError, match=rf"units\[1\]\.part\.{field}"):
        validate_report(report)


@pytest.mark.parametrize("through", ["files", "dataset"])
def test_compare_names_the_part_of_a_failing_unit(tmp_path: Path, through: str) -> None:
    """A fleet's invariant finding carries the part its report named, read from the files or from an
    ingested dataset (the `units` table's `part` column), and the command that screens the unit again on
    its host; the fleet page shows the part, `--csv` writes both."""
    import csv
    import json

    from click.testing import CliRunner

    from sdcscan.cli import cli

    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "a.json").write_text(json.dumps(make_report(fail_unit="cpu:1", hostname="node-a")))
    (fleet / "b.json").write_text(json.dumps(make_report(fail_unit=None, hostname="node-b")))
    source = fleet
    if through == "dataset":
        source = tmp_path / "ds"
        assert CliRunner().invoke(cli, ["ingest", str(fleet), "-o", str(source)]).exit_code == 0
    html, table = tmp_path / "fleet.html", tmp_path / "findings.csv"
    given = ["--from", str(source)] if through == "dataset" else [str(source)]
    r = CliRunner().invoke(cli, ["compare", *given, "--json", "--html", str(html), "--csv", str(table)])
    assert r.exit_code == 1, r.stderr
    found = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "invariant"]
    part = "CPU socket 0, physical core 1, logical CPUs 1, microcode 0x2b000590"
    assert [(f["host"], f["unit"], f["evidence"]["part"]) for f in found] == [("node-a", "cpu:1", part)]
    run = make_report()["run"]
    rerun = f"sdcscan run --profile {run['profile']['name']} --seed {run['seed']} --units cpu:1 --budget 15m"
    assert found[0]["evidence"]["rerun"] == rerun
    assert f"the part: {part}" in html.read_text()
    rows = list(csv.DictReader(table.read_text().splitlines()))
    (row,) = [r for r in rows if r["kind"] == "invariant"]
    assert (row["host"], row["unit"], row["part"], row["rerun"]) == ("node-a", "cpu:1", part, rerun)
    assert row["evidence"].startswith("4 invariant failure(s) (golden_fp32)") and row["run"] == run["id"]
