"""A small tmpfs in a private mount namespace (`unshare -m`), for tests of full and nearly full disks."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path


def can_mount_tmpfs(tmp_path: Path) -> bool:
    """Whether this machine lets a test mount a tmpfs in a private mount namespace (root, or a user
    namespace with mount rights); tests skip where it does not."""
    if shutil.which("unshare") is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir(exist_ok=True)
    cmd = f"mount -t tmpfs -o size=16k tmpfs {shlex.quote(str(probe))}"
    return subprocess.run(["unshare", "-m", "sh", "-c", cmd], capture_output=True).returncode == 0


def on_tmpfs(mount_at: Path, size: str, command: list[str], *, fill_after: str | None = None) -> list[str]:
    """A command line that mounts a tmpfs of `size` at `mount_at` in a private mount namespace, then
    runs `command` there.

    With `fill_after` (a shell glob), the command runs in the background and the tmpfs is filled to
    the last byte as soon as a file matches it (a disk that fills during the run); the exit status
    is the command's.
    """
    at = shlex.quote(str(mount_at))
    run = " ".join(shlex.quote(a) for a in command)
    script = f"mount -t tmpfs -o size={size} tmpfs {at} && "
    if fill_after is None:
        script += f"exec {run}"
    else:
        script += (
            f"{run} & pid=$!; "
            f"until ls {fill_after} >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null; do sleep 0.02; done; "
            f"cat /dev/zero > {at}/filler 2>/dev/null; wait $pid"
        )
    return ["unshare", "-m", "sh", "-c", script]
