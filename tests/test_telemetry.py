"""Telemetry: missing sources become null with a note, counters rising during a run become findings."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sdcscan.telemetry.nvml import NvmlSource
from sdcscan.telemetry.sampler import Sampler, telemetry_findings
from sdcscan.telemetry.sources import CpuSource, EdacSource, MceSource, Source


def _edac(root: Path, ce: list[int], ue: list[int]) -> None:
    for i, (c, u) in enumerate(zip(ce, ue, strict=True)):
        mc = root / "devices/system/edac/mc" / f"mc{i}"
        mc.mkdir(parents=True, exist_ok=True)
        (mc / "ce_count").write_text(f"{c}\n")
        (mc / "ue_count").write_text(f"{u}\n")


def _interrupts(root: Path, mce: list[int]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    cols = "".join(f"{'CPU' + str(i):>11}" for i in range(len(mce)))
    vals = "".join(f"{v:>11}" for v in mce)
    (root / "interrupts").write_text(
        f"     {cols}\n  0:{'          1' * len(mce)}   IO-APIC   2-edge      timer\n"
        f"MCE:{vals}   Machine check exceptions\nMCP:{vals}   Machine check polls\n"
    )


def _fake_psutil(freqs: list[float], temps: list[float]) -> Any:
    state = {"i": 0}

    def sensors_temperatures() -> dict[str, list[Any]]:
        t = temps[min(state["i"], len(temps) - 1)]
        state["i"] += 1
        return {"coretemp": [SimpleNamespace(label="Package id 0", current=t)]}

    return SimpleNamespace(
        cpu_freq=lambda percpu: [SimpleNamespace(current=f) for f in freqs],
        cpu_percent=lambda interval, percpu: [50.0] * len(freqs),
        sensors_temperatures=sensors_temperatures,
    )


def test_missing_sources_are_null_with_a_note(tmp_path: Path) -> None:
    """No EDAC tree and no MCE line: values are null, each source leaves a note, nothing raises."""
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/interrupts").write_text("           CPU0\n  0:          1   IO-APIC   timer\n")
    sources = [EdacSource(tmp_path / "sys"), MceSource(tmp_path / "proc")]
    with Sampler(["cpu:0"], interval_s=60, sources=sources) as sampler:
        pass
    summary = sampler.summary()
    assert summary["host"]["edac_ue_count"]["value"] is None
    assert summary["host"]["edac_ue_count"]["delta"] is None
    assert summary["host"]["mce_count"]["value"] is None
    assert summary["sources"] == {"edac": "unavailable", "mce": "unavailable"}
    assert any("EDAC driver not loaded" in n for n in summary["notes"])
    assert any("no MCE line" in n for n in summary["notes"])
    assert telemetry_findings(summary) == []


def test_uncorrectable_increase_is_a_finding_and_corrected_is_reported(tmp_path: Path) -> None:
    """EDAC ue_count rising during the run is an uncorrectable_errors finding; ce_count is reported."""
    sysfs = tmp_path / "sys"
    _edac(sysfs, ce=[5, 0], ue=[0, 0])
    with Sampler(["cpu:0", "cpu:1"], interval_s=60, sources=[EdacSource(sysfs)]) as sampler:
        _edac(sysfs, ce=[7, 1], ue=[0, 2])
    summary = sampler.summary()
    assert summary["host"]["edac_ce_count"] == {
        "before": 5.0, "after": 8.0, "value": 8.0, "reduce": "last", "delta": 3.0
    }  # fmt: skip
    assert summary["host"]["edac_ue_count"]["delta"] == 2.0
    kinds = {f["kind"]: f for f in telemetry_findings(summary)}
    assert set(kinds) == {"uncorrectable_errors", "corrected_errors"}
    ue = kinds["uncorrectable_errors"]
    assert ue["unit"] is None
    assert "EDAC uncorrectable memory errors" in ue["message"]
    assert "rose by 2" in ue["message"]
    assert ue["next"]


def test_machine_checks_are_counted_for_the_host(tmp_path: Path) -> None:
    """MCE counts are summed over CPUs; a rise is an uncorrectable_errors finding."""
    proc = tmp_path / "proc"
    _interrupts(proc, [0, 0])
    with Sampler(["cpu:0", "cpu:1"], interval_s=60, sources=[MceSource(proc)]) as sampler:
        _interrupts(proc, [1, 1])
    summary = sampler.summary()
    assert summary["host"]["mce_count"]["delta"] == 2.0
    assert [f["kind"] for f in telemetry_findings(summary)] == ["uncorrectable_errors"]


def test_reductions_max_temperature_mean_frequency() -> None:
    """Temperatures reduce to the max, frequencies to the mean, per unit."""
    ps = _fake_psutil([2000.0, 3000.0], temps=[50.0, 80.0, 60.0])
    with Sampler(["cpu:0", "cpu:1"], interval_s=60, sources=[CpuSource([0, 1], psutil_module=ps)]) as s:
        s.sample()
    summary = s.summary()
    assert summary["samples"] == 3
    assert summary["host"]["cpu_temp_c"]["value"] == 80.0
    assert summary["host"]["cpu_temp_c"]["after"] == 60.0
    assert summary["units"]["cpu:1"]["freq_mhz"]["value"] == 3000.0
    assert summary["units"]["cpu:0"]["load_pct"]["value"] == 50.0  # first (meaningless) reading skipped


def test_sampler_thread_samples_during_the_run() -> None:
    """The daemon thread samples every interval_s between before and after."""
    ps = _fake_psutil([1000.0], temps=[40.0])
    with Sampler(["cpu:0"], interval_s=0.02, sources=[CpuSource([0], psutil_module=ps)]) as s:
        time.sleep(0.2)
    assert s.summary()["samples"] >= 4


class _Broken(Source):
    name = "broken"
    host_metrics = ("widgets",)

    def read(self) -> dict[str, dict[str, float | None]]:
        raise RuntimeError("sensor bus on fire")


def test_a_source_that_raises_never_fails_the_run() -> None:
    """An unexpected error inside a source becomes null values and a note."""
    with Sampler(["cpu:0"], interval_s=60, sources=[_Broken()]) as s:
        pass
    summary = s.summary()
    assert summary["host"]["widgets"]["value"] is None
    assert summary["sources"] == {"broken": "unavailable"}
    assert "sensor bus on fire" in summary["notes"][0]


class _NVMLError(Exception):
    pass


def _fake_nvml(ue: list[int]) -> Any:
    calls = {"n": 0}

    def total_ecc(h: Any, kind: str, counter: str) -> int:
        if kind == "CE":
            return 3
        calls["n"] += 1
        return ue[min(calls["n"] - 1, len(ue) - 1)]

    def unsupported(*a: Any) -> Any:
        raise _NVMLError("Not Supported")

    return SimpleNamespace(
        NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_VOLATILE_ECC=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED="CE", NVML_MEMORY_ERROR_TYPE_UNCORRECTED="UE",
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetTemperature=lambda h, s: 71, nvmlDeviceGetClockInfo=lambda h, c: 1410,
        nvmlDeviceGetPowerUsage=unsupported, nvmlDeviceGetTotalEccErrors=total_ecc,
        nvmlDeviceGetRetiredPages=lambda h, c: [], nvmlDeviceGetRemappedRows=lambda h: (3, 0, False, False),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 4,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
    )  # fmt: skip


def test_nvml_unsupported_metric_is_null_and_ecc_rise_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU metric NVML does not support is None; uncorrected ECC rising names the GPU unit."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    source = NvmlSource([0], nvml=_fake_nvml(ue=[0, 1]))
    with Sampler(["cpu:0", "cuda:0"], interval_s=60, sources=[source]) as s:
        pass
    gpu = s.summary()["units"]["cuda:0"]
    assert gpu["power_w"]["value"] is None
    assert gpu["temp_c"]["value"] == 71.0
    assert gpu["util_pct"]["value"] == 97.0  # what `sdcscan doctor` shows against the power limit
    assert gpu["power_limit_w"]["value"] == 700.0  # NVML answers in mW
    assert gpu["throttle_reasons"]["value"] == 4.0
    assert gpu["remapped_rows_correctable"]["value"] == 3.0  # a tuple answer, read field by field
    assert gpu["remapped_rows_pending"]["value"] == 0.0
    findings = telemetry_findings(s.summary())
    assert [(f["kind"], f["unit"]) for f in findings] == [("uncorrectable_errors", "cuda:0")]


def test_nvml_missing_makes_gpu_metrics_null_with_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without nvidia-ml-py the GPU's metrics are null and the note says how to install it."""
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pynvml":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    with Sampler(["cuda:0"], interval_s=60, sources=[NvmlSource([0])]) as s:
        pass
    summary = s.summary()
    assert summary["units"]["cuda:0"]["ecc_uncorrected"]["value"] is None
    assert any("sdcscan[gpu]" in n for n in summary["notes"])


def test_a_gauge_keeps_a_bounded_series_whose_points_are_exact_reductions() -> None:
    """However long the run, a gauge's series stays within 2 x MAX_POINTS points; each point is the
    reduction of the samples it covers (max for a temperature, mean for a clock), and a counter keeps none."""
    from sdcscan.telemetry.sampler import MAX_POINTS, _Acc

    n = 10 * MAX_POINTS + 7
    temps, clocks, counter = _Acc("max"), _Acc("mean"), _Acc("last")
    for i in range(n):
        temps.add(float(i % 50))
        clocks.add(float(i))
        counter.add(float(i))
    t, c = temps.to_dict(True, 5.0)["series"], clocks.to_dict(True, 5.0)["series"]
    assert MAX_POINTS <= len(t["points"]) <= 2 * MAX_POINTS and "series" not in counter.to_dict(True, 5.0)
    stride = int(c["every_s"] / 5.0)
    assert stride & (stride - 1) == 0 and stride * (len(c["points"]) - 1) < n <= stride * len(c["points"])
    assert c["points"][0] == sum(range(stride)) / stride  # the mean of the samples it covers
    assert t["points"][0] == max(i % 50 for i in range(stride))
    assert c["points"][-1] == sum(range(stride * (len(c["points"]) - 1), n)) / (
        n - stride * (len(c["points"]) - 1)
    )


def test_the_run_reports_a_series_per_gauge() -> None:
    ps = _fake_psutil([1000.0, 2000.0, 3000.0], temps=[40.0, 70.0, 50.0])
    with Sampler(["cpu:0"], interval_s=60, sources=[CpuSource([0], psutil_module=ps)]) as s:
        s.sample()
    host = s.summary()["host"]
    assert host["cpu_temp_c"]["series"] == {"every_s": 60.0, "points": [40.0, 70.0, 50.0]}


class _Gpu(Source):
    """One GPU whose utilisation and power follow a script, one sample at a time."""

    name = "fake-gpu"
    unit_metrics = ("util_pct", "power_w", "temp_c")
    unit_prefix = "cuda:"

    def __init__(self, util: list[float], power: list[float]) -> None:
        super().__init__()
        self.util, self.power = iter(util), iter(power)

    def read(self) -> dict[str, dict[str, float | None]]:
        return {"cuda:0": {"util_pct": next(self.util), "power_w": next(self.power), "temp_c": 50.0}}


def test_a_gpus_load_is_also_reduced_over_the_samples_taken_while_it_ran_a_case() -> None:
    """Start-up (0% at 90 W) and a wait between cases count in the run's mean, not in `in_cases`, whose
    mean and max cover the samples inside cases only; the host and other metrics get no `in_cases`."""
    from sdcscan.events import CaseFinished, CaseStarted
    from sdcscan.telemetry.sampler import CaseClock

    clock = CaseClock()
    gpu = _Gpu(util=[0, 0, 98, 100, 10, 96], power=[90, 90, 650, 700, 200, 640])
    with Sampler(["cuda:0"], interval_s=60, sources=[gpu], busy=clock.busy) as s:  # start-up: 0%, 90 W
        s.sample()  # still starting
        clock.observe(CaseStarted("cuda:0", 0, "gemm_int8"))
        s.sample()
        s.sample()
        clock.observe(CaseFinished("cuda:0", 0, "gemm_int8", 0, {}))  # type: ignore[arg-type]
        s.sample()  # between cases: 10%, 200 W
        clock.observe(CaseStarted("cuda:0", 1, "gemm_int8"))
    # the sample taken on leaving falls inside case 1
    unit = s.summary()["units"]["cuda:0"]
    assert unit["util_pct"]["value"] == round(sum([0, 0, 98, 100, 10, 96]) / 6, 3)  # start-up counted
    assert unit["util_pct"]["in_cases"] == {"mean": 98.0, "max": 100.0, "samples": 3}
    assert unit["power_w"]["in_cases"] == {"mean": 663.333, "max": 700.0, "samples": 3}
    assert "in_cases" not in unit["temp_c"]


def test_a_busy_callback_that_raises_costs_only_the_case_reduction() -> None:
    """Telemetry never fails a run: without a usable `busy`, the run-wide values stay, `in_cases` goes."""

    def broken(unit: str) -> bool:
        raise RuntimeError("no clock")

    with Sampler(["cuda:0"], interval_s=60, sources=[_Gpu([50, 60], [100, 200])], busy=broken) as s:
        pass
    unit = s.summary()["units"]["cuda:0"]
    assert unit["util_pct"]["value"] == 55.0 and "in_cases" not in unit["util_pct"]


def test_the_doctor_shows_a_gpus_load_over_case_time_and_says_when_it_cannot() -> None:
    """With `in_cases` the doctor's line gives case-time mean and max; without, the whole run's, saying so."""
    from sdcscan.doctor.judge import gpu_load

    metrics = {
        "util_pct": {"value": 40.0, "in_cases": {"mean": 97.0, "max": 100.0, "samples": 30}},
        "power_w": {"value": 300.0, "in_cases": {"mean": 650.0, "max": 700.0, "samples": 30}},
        "clock_sm_mhz": {"value": 1500.0, "in_cases": {"mean": 1980.0, "max": 1980.0, "samples": 30}},
        "power_limit_w": {"value": 700.0},
        "temp_c": {"value": 71.0},
    }
    load = gpu_load(metrics)
    assert (load["util_pct"], load["util_pct_max"], load["power_w"], load["while"]) == (
        97.0,
        100.0,
        650.0,
        "running cases",
    )
    assert "utilisation 97 % (max 100)" in load["line"] and "over running cases" in load["line"]
    bare = gpu_load({m: {"value": s["value"]} for m, s in metrics.items()})
    assert bare["util_pct"] == 40.0 and bare["util_pct_max"] is None and "over the whole run" in bare["line"]


@pytest.mark.slow
def test_a_run_samples_telemetry_as_often_as_asked(tmp_path: Path) -> None:
    """`sdcscan run --telemetry-interval 0.1` samples every 0.1 s (the GPU check's 30 s run at 100 ms),
    and the report says at what interval."""
    import json
    import subprocess

    from tests.helpers.cli import child_env, sdcscan_cmd

    out = tmp_path / "r.json"
    args = ("run", "--units", "cpu:0", "--workloads", "matmul_golden", "--budget", "8s", "--telemetry-interval",
            "0.1", "-o", str(out), "--no-history")  # fmt: skip
    env = {**child_env(), "XDG_STATE_HOME": str(tmp_path / "state")}
    proc = subprocess.run(
        sdcscan_cmd(*args), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    telemetry = json.loads(out.read_text())["telemetry"]
    assert telemetry["interval_s"] == 0.1 and telemetry["samples"] >= 20
