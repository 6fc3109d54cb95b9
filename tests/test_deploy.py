"""deploy/: shell syntax, manifest validity, and the wrappers' exit-code mapping with a fake sdcscan."""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers.reports import make_report

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SLURM = DEPLOY / "slurm" / "sdcscan-healthcheck.sh"
NPD = DEPLOY / "npd" / "sdcscan-npd.sh"

FAKE_SDCSCAN = r"""#!/bin/bash
# fake sdcscan: `run ... --out PATH` copies $FAKE_REPORT there, prints $FAKE_STDERR, exits $FAKE_RC;
# `status --json` prints $FAKE_FLAGGED (comma-separated units) as sdcscan's status JSON.
cmd=$1; shift
out=
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
if [ "$cmd" = run ]; then
    [ -n "${FAKE_STDERR:-}" ] && echo "$FAKE_STDERR" >&2
    [ -n "$out" ] && [ -n "${FAKE_REPORT:-}" ] && cp "$FAKE_REPORT" "$out"
    exit "$FAKE_RC"
fi
flagged=""
for u in ${FAKE_FLAGGED//,/ }; do flagged="$flagged${flagged:+,}{\"unit\": \"$u\"}"; done
echo "{\"flagged\": [$flagged]}"
[ -z "$flagged" ]
"""
FAKE_SCONTROL = '#!/bin/bash\nprintf "%s\\n" "$@" >> "$SCONTROL_LOG"\n'


def test_shell_scripts_have_valid_syntax() -> None:
    """bash -n accepts every shell script in deploy/."""
    scripts = sorted(DEPLOY.rglob("*.sh"))
    assert len(scripts) >= 2
    for script in scripts:
        subprocess.run(["bash", "-n", str(script)], check=True)
        assert os.access(script, os.X_OK), f"{script} is not executable"


def test_manifests_parse() -> None:
    """YAML manifests load; the DaemonSet runs the quick profile and writes the textfile to a hostPath."""
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "sdcscan-daemonset.yaml").read_text()))
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    script = " ".join(spec["containers"][0]["args"])
    assert "--profile quick" in script and "--prom /textfile/sdcscan.prom" in script
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    assert paths["textfile"] == "/var/lib/node_exporter/textfile_collector"
    for path in DEPLOY.rglob("*.json"):
        json.loads(path.read_text())


def test_npd_config_maps_a_permanent_condition_to_the_wrapper() -> None:
    """The NPD custom-plugin config is a permanent-condition rule that runs the wrapper."""
    config = json.loads((DEPLOY / "npd" / "sdcscan-plugin.json").read_text())
    assert config["plugin"] == "custom"
    rule = config["rules"][0]
    assert rule["type"] == "permanent" and rule["path"].endswith("sdcscan-npd.sh")
    assert rule["condition"] == config["conditions"][0]["type"]


def test_systemd_units_and_cron_line() -> None:
    """The service is a oneshot running `sdcscan run`; the timer installs; the cron line is well formed."""
    units = {}
    for name in ("sdcscan.service", "sdcscan.timer"):
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
        parser.read(DEPLOY / "systemd" / name)
        units[name] = parser
    assert units["sdcscan.service"]["Service"]["Type"] == "oneshot"
    assert "sdcscan run --profile quick" in units["sdcscan.service"]["Service"]["ExecStart"]
    assert units["sdcscan.timer"]["Install"]["WantedBy"] == "timers.target"
    lines = [ln for ln in (DEPLOY / "cron" / "sdcscan.cron").read_text().splitlines() if ln and ln[0] != "#"]
    jobs = [ln for ln in lines if not re.match(r"^[A-Z_]+=", ln)]
    assert len(jobs) == 1
    assert re.match(r"^(\S+\s+){5}root\s+sdcscan run --profile quick ", jobs[0])


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, str]:
    """PATH with a fake sdcscan and scontrol first; the wrappers' state in tmp_path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("sdcscan", FAKE_SDCSCAN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SDCSCAN_STATE_DIR": str(tmp_path / "state"),
        "SDCSCAN_PYTHON": sys.executable,
        "SCONTROL_LOG": str(tmp_path / "scontrol.log"),
        "FAKE_FLAGGED": "",
    }


def _run(script: Path, env: dict[str, str], tmp_path: Path, rc: int, report: dict[str, Any] | None = None,
         **extra: str) -> tuple[int, str, list[str]]:  # fmt: skip
    """Run a wrapper with the fake sdcscan exiting `rc`; return its exit code, stdout and scontrol's args."""
    full = {**env, "FAKE_RC": str(rc), **extra}
    if report is not None:
        path = tmp_path / "fake-report.json"
        path.write_text(json.dumps(report))
        full["FAKE_REPORT"] = str(path)
    proc = subprocess.run(["bash", str(script)], env=full, capture_output=True, text=True, timeout=30)
    log = Path(env["SCONTROL_LOG"])
    calls = log.read_text().splitlines() if log.exists() else []
    return proc.returncode, proc.stdout, calls


def _invalid_report() -> dict[str, Any]:
    return make_report(fail_unit=None, invalid_unit="cpu:0")


@pytest.mark.skipif(shutil.which("hostname") is None, reason="needs hostname(1)")
@pytest.mark.parametrize(
    ("rc", "report", "extra", "want_rc", "reason"),
    [
        (0, make_report(fail_unit=None), {}, 0, None),
        (1, make_report(fail_unit="cpu:1"), {}, 1, "sdcscan: fail cpu:1"),
        (3, _invalid_report(), {}, 1, "sdcscan: invalid cpu:0"),
        (3, None, {"FAKE_STDERR": "Error: another sdcscan run is active (pid 7)"}, 0, None),
        (2, None, {}, 0, None),
        (143, None, {}, 0, None),
        (0, make_report(fail_unit=None), {"FAKE_FLAGGED": "cpu:1"}, 1, "sdcscan: flagged cpu:1"),
    ],
    ids=["pass", "fail", "invalid", "locked", "usage", "sigterm", "sticky"],
)
def test_slurm_wrapper_drains_on_fail_and_invalid(
    fake_env: dict[str, str], tmp_path: Path, rc: int, report: Any, extra: dict[str, str], want_rc: int,
    reason: str | None,
) -> None:  # fmt: skip
    """Exit 1 or 3 (or a sticky flag) drains the node with a reason naming the unit; others never drain."""
    code, _, calls = _run(SLURM, fake_env, tmp_path, rc, report, **extra)
    assert code == want_rc
    if reason is None:
        assert calls == []
    else:
        node = socket.gethostname().split(".")[0]
        assert calls[:3] == ["update", f"nodename={node}", "state=drain"]
        assert calls[3].startswith(f"reason={reason}")


@pytest.mark.parametrize(
    ("rc", "report", "extra", "want_rc", "message"),
    [
        (0, make_report(fail_unit=None), {}, 0, "no silent data corruption"),
        (1, make_report(fail_unit="cpu:1"), {}, 1, "suspected on cpu:1"),
        (0, make_report(fail_unit=None), {"FAKE_FLAGGED": "cpu:1"}, 1, "cpu:1 failed earlier"),
        (3, _invalid_report(), {}, 2, "could not judge cpu:0"),
        (2, None, {}, 2, "exited 2"),
        (130, None, {}, 2, "exited 130"),
    ],
    ids=["ok", "fail", "sticky", "invalid", "usage", "interrupted"],
)
def test_npd_wrapper_maps_exit_codes(
    fake_env: dict[str, str], tmp_path: Path, rc: int, report: Any, extra: dict[str, str], want_rc: int,
    message: str,
) -> None:  # fmt: skip
    """sdcscan 0 -> OK(0), 1 or a sticky flag -> NonOK(1), anything else -> Unknown(2); one message line."""
    code, out, _ = _run(NPD, fake_env, tmp_path, rc, report, **extra)
    assert code == want_rc
    assert message in out.splitlines()[0]
