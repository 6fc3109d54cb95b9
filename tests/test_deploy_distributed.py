"""deploy/ for distributed runs: the Slurm batch job (syntax, its srun line, the rendezvous it names, the
exit code it keeps, run against a fake srun and scontrol), the Kubernetes Indexed Job and headless Service,
and that every `sdcscan run` flag these files and the README use exists."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sdcscan.cli.run import run_cmd
from sdcscan.profile import parse_budget

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SBATCH = DEPLOY / "slurm" / "sdcscan-distributed.sbatch"
MANIFEST = DEPLOY / "kubernetes" / "sdcscan-distributed.yaml"
README = DEPLOY / "README.md"
README_SECTION = "## Distributed runs (torchrun)"
# The flags `sdcscan run` gains for distributed runs (issue 13), whether or not the command has them yet.
DISTRIBUTED_FLAGS = {
    "--distributed",
    "--standalone",
    "--nnodes",
    "--nproc-per-node",
    "--rdzv-endpoint",
    "--rdzv-id",
    "--collective-timeout",
    "--join-timeout",
}
RENDEZVOUS_FLAGS = ("--distributed", "--nnodes", "--nproc-per-node", "--rdzv-endpoint", "--rdzv-id")
JOIN_TIMEOUT_S = 120  # sdcscan's default --join-timeout: the rendezvous may take this long


# --- which flags `sdcscan run` takes, and which ones a text uses -------------------------------------------


def _run_flags() -> set[str]:
    """Every long option `sdcscan run` has now, plus the distributed ones."""
    flags = {opt for param in run_cmd.params for opt in (*param.opts, *param.secondary_opts)}
    return {f for f in flags if f.startswith("--")} | DISTRIBUTED_FLAGS


def _joined(text: str) -> str:
    """Shell continuation lines joined, so a command split over lines reads as one."""
    return re.sub(r"\\\n\s*", " ", text)


def _sdcscan_flags(text: str) -> set[str]:
    """The long flags given to `sdcscan run` (or `"$SDCSCAN" run`) in a text: on the rest of each such
    command's line, up to a closing backtick or a shell comment. Flags before it (srun's, torchrun's)
    are not sdcscan's and are left out."""
    flags: set[str] = set()
    for match in re.finditer(r'(?:\bsdcscan|"\$SDCSCAN")\s+run\b([^`\n]*)', _joined(text)):
        command = re.split(r"\s#", match.group(1))[0]
        flags |= set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", command))
    return flags


def _readme_section() -> str:
    text = README.read_text()
    assert README_SECTION in text, f"deploy/README.md has no section {README_SECTION!r}"
    section = text.split(README_SECTION, 1)[1]
    return section.split("\n## ", 1)[0]


def test_flag_check_catches_a_misspelt_or_unknown_flag() -> None:
    """The check below can fail: a misspelt flag after `sdcscan run` is found; srun's and torchrun's own
    flags before it are not taken for sdcscan's."""
    text = 'srun --label \\\n    "$SDCSCAN" run --distributed --rdzv-endpont h:1 --out r.json  # --not-this\n'
    assert _sdcscan_flags(text) == {"--distributed", "--rdzv-endpont", "--out"}
    assert _sdcscan_flags(text) - _run_flags() == {"--rdzv-endpont"}
    assert _sdcscan_flags("torchrun --nnodes 2 -m sdcscan run --budget 1m") == {"--budget"}
    assert {"--profile", "--budget", "--out", "--history", "--no-history", "--foreground"} <= _run_flags()


@pytest.mark.parametrize("path", [SBATCH, MANIFEST, README], ids=["sbatch", "manifest", "readme"])
def test_every_sdcscan_run_flag_exists(path: Path) -> None:
    """Each `--flag` given to `sdcscan run` in the file is an existing `run` flag or a distributed one."""
    text = _readme_section() if path == README else path.read_text()
    used = _sdcscan_flags(text)
    if path == MANIFEST:
        used |= {a for a in _container()["args"] if a.startswith("--")}
    assert "--distributed" in used
    assert used - _run_flags() == set(), f"unknown `sdcscan run` flags in {path.name}"


# --- Slurm -------------------------------------------------------------------------------------------------


def _sbatch_directives() -> dict[str, str]:
    """The active `#SBATCH --name=value` lines (a `##SBATCH` line is a comment)."""
    found = re.findall(r"^#SBATCH\s+(--[a-z-]+)(?:=(\S+))?", SBATCH.read_text(), re.M)
    return {name: value for name, value in found}


def _slurm_seconds(limit: str) -> int:
    """A Slurm time limit (`MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`) in seconds."""
    days, _, clock = limit.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def _srun_command() -> str:
    lines = [line.strip() for line in _joined(SBATCH.read_text()).splitlines()]
    (command,) = [line for line in lines if line.startswith("srun ")]
    return command


def test_sbatch_has_valid_syntax_and_is_executable() -> None:
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    assert os.access(SBATCH, os.X_OK)


def test_sbatch_asks_for_one_task_per_node_and_a_time_that_covers_the_budget() -> None:
    """One `sdcscan run --distributed` per node, whole nodes, a GPU request as a commented example, and a
    time limit of at least the default budget + the rendezvous's join timeout + a minute to end."""
    directives = _sbatch_directives()
    assert directives["--ntasks-per-node"] == "1" and "--nodes" in directives
    assert "--exclusive" in directives
    assert "--gpus-per-node" not in directives
    assert re.search(r"^##SBATCH --gpus-per-node=\d+$", SBATCH.read_text(), re.M)
    default_budget = re.search(r"^BUDGET=\$\{SDCSCAN_BUDGET:-(\w+)\}$", SBATCH.read_text(), re.M)
    assert default_budget, "the budget must be settable by SDCSCAN_BUDGET, with a default"
    budget_s = parse_budget(default_budget.group(1))
    assert _slurm_seconds(directives["--time"]) >= budget_s + JOIN_TIMEOUT_S + 60


def test_sbatch_srun_starts_sdcscan_distributed_with_the_rendezvous_flags() -> None:
    """srun starts `sdcscan run --distributed` once per node, with the rendezvous on the allocation's first
    node and the job id as the rendezvous id, and does not kill the others when one node ends early."""
    command = _srun_command()
    assert "--ntasks-per-node=1" in command and "--kill-on-bad-exit=0" in command
    sdcscan = command[command.index('"$SDCSCAN" run') :]
    assert all(flag in sdcscan.split() for flag in RENDEZVOUS_FLAGS)
    assert '--rdzv-endpoint "$HEAD:$PORT"' in sdcscan and '--rdzv-id "$SLURM_JOB_ID"' in sdcscan
    assert '--out "$REPORT"' in sdcscan and '--budget "$BUDGET"' in sdcscan
    text = SBATCH.read_text()
    assert 'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)' in text
    assert re.search(r"^PORT=\$\{SDCSCAN_RDZV_PORT:-\d+\}$", text, re.M)


FAKE_SCONTROL = '#!/bin/bash\n[ "$1 $2" = "show hostnames" ] && printf "gpu017\\ngpu018\\n"\n'
# Logs its arguments (one per line) and SDCSCAN_HISTORY; writes a cluster report saying
# $FAKE_CLUSTER_CODE to the path after --out (none when unset); exits $FAKE_SRUN_RC.
FAKE_SRUN = r"""#!/bin/bash
printf '%s\n' "$@" > "$FAKE_ARGV"
echo "$SDCSCAN_HISTORY" > "$FAKE_HISTORY"
out=; prev=
for arg in "$@"; do [ "$prev" = --out ] && out=$arg; prev=$arg; done
if [ -n "${FAKE_CLUSTER_CODE:-}" ]; then
    echo "{\"verdict\": \"x\", \"exit_code\": $FAKE_CLUSTER_CODE, \"units\": []}" > "$out"
fi
exit "$FAKE_SRUN_RC"
"""


def _run_sbatch(
    tmp_path: Path, srun_rc: int, cluster_code: int | None, **env: str
) -> tuple[int, list[str], str]:
    """The batch script under a fake srun and scontrol, as Slurm would start it on the first node:
    (exit code, srun's arguments, stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    argv_log = tmp_path / "srun.argv"
    argv_log.unlink(missing_ok=True)
    full_env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu[017-018]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_ON_NODE": "64",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SDCSCAN_PYTHON": sys.executable,
        "FAKE_ARGV": str(argv_log),
        "FAKE_HISTORY": str(tmp_path / "srun.history"),
        "FAKE_SRUN_RC": str(srun_rc),
        **({} if cluster_code is None else {"FAKE_CLUSTER_CODE": str(cluster_code)}),
        **env,
    }
    proc = subprocess.run(["bash", str(SBATCH)], env=full_env, capture_output=True, text=True, timeout=30)
    argv = argv_log.read_text().splitlines() if argv_log.exists() else []
    return proc.returncode, argv, proc.stderr


def _value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


@pytest.mark.parametrize(
    ("srun_rc", "cluster_code", "want"),
    [
        (0, 0, 0),
        (1, 1, 1),
        (3, 1, 1),  # one node 1, another 3: srun says 3, the cluster report keeps the 1
        (143, 1, 1),
        (3, 3, 3),
        (3, None, 3),  # rank 0's node died: no cluster report, srun's code
        (0, 3, 3),  # every node 0 but the cluster could not judge: not a pass
        (2, None, 2),
        (143, None, 143),
        (0, None, 0),
    ],
    ids=["pass", "fail", "fail-beside-invalid", "fail-then-stopped", "invalid", "invalid-no-report",
         "report-not-pass", "usage", "interrupted", "pass-report-elsewhere"],
)  # fmt: skip
def test_sbatch_exit_code_keeps_sdc_found_over_could_not_judge(
    tmp_path: Path, srun_rc: int, cluster_code: int | None, want: int
) -> None:
    code, argv, _ = _run_sbatch(tmp_path, srun_rc, cluster_code)
    assert argv, "srun was not started"
    assert code == want


def test_sbatch_names_the_first_node_and_the_job_as_the_rendezvous(tmp_path: Path) -> None:
    """Defaults: rendezvous gpu017:29400 with id = job id, one rank per CPU without GPUs, the 10m budget,
    sdcscan's own profile, the cluster report in a per-job directory, a node-local history."""
    code, argv, _ = _run_sbatch(tmp_path, 0, 0)
    assert code == 0
    sdcscan = argv[argv.index("sdcscan") :]
    assert sdcscan[:2] == ["sdcscan", "run"] and "--distributed" in sdcscan
    assert _value(sdcscan, "--rdzv-endpoint") == "gpu017:29400" and _value(sdcscan, "--rdzv-id") == "4242"
    assert _value(sdcscan, "--nnodes") == "2" and _value(sdcscan, "--nproc-per-node") == "64"
    assert _value(sdcscan, "--budget") == "10m" and "--profile" not in sdcscan
    assert _value(sdcscan, "--out") == str(tmp_path / "sdcscan-distributed-4242" / "cluster.json")
    assert "--nodes=2" in argv and "--cpus-per-task=64" in argv
    assert (tmp_path / "srun.history").read_text().strip() == "/var/lib/sdcscan/history.sqlite3"


def test_sbatch_settings_come_from_the_environment(tmp_path: Path) -> None:
    """GPUs allocated: one rank per GPU; budget, profile, port, report directory and extra arguments."""
    out_dir = tmp_path / "shared"
    code, argv, _ = _run_sbatch(
        tmp_path, 0, 0, SLURM_GPUS_ON_NODE="8", SDCSCAN_BUDGET="1h", SDCSCAN_PROFILE="burnin",
        SDCSCAN_RDZV_PORT="29500", SDCSCAN_OUT_DIR=str(out_dir), SDCSCAN_ARGS="--collective-timeout 30s",
    )  # fmt: skip
    assert code == 0
    sdcscan = argv[argv.index("sdcscan") :]
    assert _value(sdcscan, "--nproc-per-node") == "8" and _value(sdcscan, "--budget") == "1h"
    assert _value(sdcscan, "--profile") == "burnin" and _value(sdcscan, "--rdzv-endpoint") == "gpu017:29500"
    assert _value(sdcscan, "--out") == str(out_dir / "cluster.json")
    assert sdcscan[-2:] == ["--collective-timeout", "30s"]


@pytest.mark.parametrize(
    "env", [{"SLURM_JOB_ID": ""}, {"SDCSCAN_NPROC_PER_NODE": "eight"}, {"SDCSCAN_RDZV_PORT": "29400x"}],
    ids=["not-under-slurm", "bad-ranks", "bad-port"],
)  # fmt: skip
def test_sbatch_refuses_a_bad_setting_with_exit_2_before_srun(tmp_path: Path, env: dict[str, str]) -> None:
    """Its own configuration errors exit 2 (never 1, which reads as SDC found), and nothing starts."""
    code, argv, stderr = _run_sbatch(tmp_path, 0, 0, **env)
    assert code == 2 and argv == [] and "sdcscan-distributed:" in stderr


# --- Kubernetes --------------------------------------------------------------------------------------------


def _documents() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert len(kinds) == len(set(kinds))
    return {d["kind"]: d for d in docs}


def _job() -> dict[str, Any]:
    return _documents()["Job"]


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = _job()["spec"]["template"]["spec"]
    return pod


def _container() -> dict[str, Any]:
    (container,) = _pod()["containers"]
    return dict(container)


def _env() -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in _container()["env"]}


def _arg(flag: str) -> str:
    args = _container()["args"]
    return str(args[args.index(flag) + 1])


def test_manifest_is_an_indexed_job_of_n_pods_that_never_retries() -> None:
    job = _job()
    assert job["apiVersion"] == "batch/v1"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == int(_env()["SDCSCAN_NNODES"]["value"]) >= 2
    assert spec["backoffLimit"] == 0
    assert _pod()["restartPolicy"] == "Never"
    anti = _pod()["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"  # one pod per node


def test_headless_service_gives_pod_0_the_rendezvous_name() -> None:
    """The Service is headless and selects the Job's pods; the pods' subdomain is the Service, so pod 0 of
    the Indexed Job is `<job>-0.<service>.<namespace>.svc...`: the endpoint every pod is given."""
    service, job = _documents()["Service"], _job()
    assert service["spec"]["clusterIP"] == "None"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert _pod()["subdomain"] == service["metadata"]["name"]
    namespace = job["metadata"]["namespace"]
    assert service["metadata"]["namespace"] == namespace
    (port,) = service["spec"]["ports"]
    pod0 = f"{job['metadata']['name']}-0.{service['metadata']['name']}.{namespace}.svc.cluster.local"
    assert _env()["SDCSCAN_RDZV_ENDPOINT"]["value"] == f"{pod0}:{port['port']}"
    assert _arg("--rdzv-endpoint") == "$(SDCSCAN_RDZV_ENDPOINT)"


def test_pods_run_sdcscan_distributed_with_the_rendezvous_and_budget_from_env() -> None:
    """`run --distributed` with every rendezvous flag; the budget from SDCSCAN_BUDGET, the rendezvous id
    from the Job's uid (the same on every pod, new for every Job); every $(VAR) in the arguments is
    defined (Kubernetes would pass an undefined one on literally)."""
    container = _container()
    assert "command" not in container  # the image's entrypoint: tini -- sdcscan
    args = container["args"]
    assert args[:2] == ["run", "--distributed"] and all(flag in args for flag in RENDEZVOUS_FLAGS)
    env = _env()
    assert _arg("--budget") == "$(SDCSCAN_BUDGET)"
    parse_budget(env["SDCSCAN_BUDGET"]["value"])
    uid = env["SDCSCAN_RDZV_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert uid == "metadata.labels['batch.kubernetes.io/controller-uid']"
    referenced = set(re.findall(r"\$\((\w+)\)", " ".join(args)))
    assert referenced and referenced <= env.keys()
    dockerfile = (DEPLOY / "kubernetes" / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "sdcscan"]' in dockerfile
    tag = re.search(r"docker build -t (\S+) ", dockerfile)
    assert tag and container["image"] == tag.group(1)


def test_deadline_covers_the_budget_and_the_rendezvous() -> None:
    budget_s = parse_budget(_env()["SDCSCAN_BUDGET"]["value"])
    assert _job()["spec"]["activeDeadlineSeconds"] >= budget_s + JOIN_TIMEOUT_S + 60


def test_pod_failure_policy_names_sdc_found_and_could_not_judge() -> None:
    """Exit 1 and exit 3 of the sdcscan container each fail the Job through a rule of their own, so the Job's
    Failed condition says which; the comments tell the operator what each looks like."""
    rules = _job()["spec"]["podFailurePolicy"]["rules"]
    by_code = {
        code: index
        for index, rule in enumerate(rules)
        if "onExitCodes" in rule
        for code in rule["onExitCodes"]["values"]
    }
    for code in (1, 3):
        rule = rules[by_code[code]]
        assert rule["action"] == "FailJob" and rule["onExitCodes"]["operator"] == "In"
        assert rule["onExitCodes"]["containerName"] == _container()["name"]
        assert f"failed with exit code {code} matching FailJob rule at index {by_code[code]}" in (
            MANIFEST.read_text().replace("\n#           ", " ")
        )
    assert 0 not in by_code


def test_gpu_requests_are_commented_and_the_pod_keeps_least_privilege() -> None:
    text = MANIFEST.read_text()
    assert re.search(r"^\s+# nvidia\.com/gpu: \d+", text, re.M)
    assert "nvidia.com/gpu" not in json.dumps(_container()["resources"])
    assert "cpu" not in _container()["resources"]["limits"]  # a CFS quota would throttle the pinned ranks
    pod = _pod()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["automountServiceAccountToken"] is False
    ctx = _container()["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"] for m in _container()["volumeMounts"]}
    assert str(Path(_arg("--out")).parent) in mounts and "/tmp" in mounts


# --- README ------------------------------------------------------------------------------------------------


def test_readme_section_gives_the_commands_reports_exit_codes_and_the_torchrun_caveat() -> None:
    section = _readme_section()
    for command in (
        "sbatch --nodes=4 deploy/slurm/sdcscan-distributed.sbatch",
        "kubectl apply -f deploy/kubernetes/sdcscan-distributed.yaml",
        "sdcscan run --distributed --standalone --nproc-per-node 4 --budget 20s --out r.json",
        "-m sdcscan run --distributed",
    ):
        assert command in section
    assert "--nnodes 2" in section  # by hand on two nodes
    assert "<stem>.rank<R>.json" in section
    for code in ("| 0 |", "| 1 |", "| 2 |", "| 3 |", "| 130, 143 |"):
        assert code in section
    assert "torchrun exits 1" in section
