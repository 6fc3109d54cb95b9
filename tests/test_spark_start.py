"""`compare --engine spark` before the first query (issue 43): a missing or old Java is a clear usage error,
and a JVM that hangs at start is bounded. No real JVM is needed: a fake `java` says its version or hangs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from sdcscan.fleet.engine_spark import SPARK_START_TIMEOUT_ENV
from sdcscan.fleet.ingest import ingest
from tests.helpers.cli import child_env, sdcscan_cmd
from tests.helpers.fleet import report
from tests.helpers.tools import missing_tool

pytest.importorskip("pyspark")
pytest.importorskip("duckdb")
# Spark's JVM takes both cores, as a launched world of four ranks does: these tests run on the pytest worker
# of the worlds (tests/test_distributed_run.py), one at a time, so neither starves the other's start-up
pytestmark = pytest.mark.xdist_group("launched_worlds")

OLD = "#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n"
HANGS = '#!/bin/sh\nif [ "$1" = "-version" ]; then echo \'openjdk version "17.0.9"\' >&2; exit 0; fi\nexec sleep 600\n'


def _java_home(tmp_path: Path, name: str, script: str) -> Path:
    home = tmp_path / name
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(script)
    java.chmod(0o755)
    return home


def _dataset(tmp_path: Path) -> Path:
    reports = tmp_path / "reports"
    reports.mkdir()
    for host in ("h0", "h1", "h2"):
        (reports / f"{host}.json").write_text(json.dumps(report(host)))
    ingest([str(reports)], tmp_path / "ds", workers=1)
    return tmp_path / "ds"


def _compare(tmp_path: Path, java_home: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**child_env(), "JAVA_HOME": java_home, "XDG_STATE_HOME": str(tmp_path / "state"), **env}
    args = sdcscan_cmd("compare", "--from", str(_dataset(tmp_path)), "--engine", "spark")
    return subprocess.run(args, capture_output=True, text=True, env=environ, cwd=tmp_path, timeout=120)


@pytest.mark.parametrize(("home", "said"), [("old", "is Java 11"), ("missing", "has no bin/java")])
def test_java_missing_or_too_old_is_a_usage_error_that_says_so(tmp_path: Path, home: str, said: str) -> None:
    """Exit 2 with the reason and what to install, not "Spark cannot read the dataset"."""
    java_home = str(_java_home(tmp_path, "old", OLD)) if home == "old" else str(tmp_path / "no-java")
    done = _compare(tmp_path, java_home)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "openjdk-17-jre-headless" in done.stderr
    assert "cannot read the dataset" not in done.stderr


@pytest.mark.slow
def test_a_jvm_that_hangs_at_start_is_bounded_and_killed(tmp_path: Path) -> None:
    """A `java` that never answers: exit 3 after the start-up limit, saying so, and no JVM left behind."""
    java_home = _java_home(tmp_path, "hangs", HANGS)
    started = time.monotonic()
    done = _compare(tmp_path, str(java_home), **{SPARK_START_TIMEOUT_ENV: "8"})
    assert done.returncode == 3, done.stderr
    assert "did not start within 8 s" in done.stderr
    assert time.monotonic() - started < 60
    left = [
        p for p in psutil.process_iter(["cmdline"]) if str(java_home) in " ".join(p.info["cmdline"] or [])
    ]
    assert left == [], [p.info["cmdline"] for p in left]


def test_the_start_up_limit_must_be_a_positive_number(tmp_path: Path) -> None:
    """A bad SDCSCAN_SPARK_START_TIMEOUT_S is a usage error (exit 2) naming it."""
    done = _compare(tmp_path, os.environ.get("JAVA_HOME", "/usr"), **{SPARK_START_TIMEOUT_ENV: "soon"})
    assert done.returncode == 2 and SPARK_START_TIMEOUT_ENV in done.stderr, done.stderr


@pytest.mark.slow
def test_the_jvms_log_goes_to_the_state_directory_and_stderr_carries_sdcscans_lines(tmp_path: Path) -> None:
    """A real local Spark: its warnings and the stack traces it prints while it stops go to
    state/sdcscan/spark/jvm.log; stderr has sdcscan's summary and no Java stack line."""
    import shutil

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        missing_tool(
            "Java 17 or newer, which Spark needs,", "Debian: apt-get install openjdk-17-jre-headless"
        )
    done = _compare(
        tmp_path, os.environ.get("JAVA_HOME") or str(Path(shutil.which("java") or "").resolve().parents[1])
    )
    assert done.returncode == 0, done.stderr
    assert "Compared 3 report(s)" in done.stderr
    assert not [line for line in done.stderr.splitlines() if line.startswith("\tat ") or " ERROR " in line]
    assert (tmp_path / "state" / "sdcscan" / "spark" / "jvm.log").exists()
