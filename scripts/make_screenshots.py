#!/usr/bin/env python3
"""Regenerate docs/report-page.png and docs/fleet-page.png: the two HTML pages as a browser shows them.

The run page is the recorded burn-in tests/data/report_burnin.json (`sdcscan report --html`); the fleet
page is a simulated 10,000-host fleet (scripts/simulate_fleet.py --hosts 10000 --units 8 --cases 100,
`sdcscan compare --html`). Each page is photographed by headless Chromium's --screenshot at a fixed
window size, so the pictures change only when the pages do. Prints one JSON line: each page's bytes.

Example:
    python scripts/make_screenshots.py                 # needs chromium (apt-get install chromium)
    python scripts/make_screenshots.py --fleet /tmp/f  # reuse (or keep) the simulated fleet there
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURNIN = "tests/data/report_burnin.json"  # relative to ROOT, where sdcscan runs: the page's footer names it
NOW = "2025-06-02T12:00:00Z"  # simulate_fleet's reference time: ages are the same every time
WIDTH = 1280
HEIGHTS = {"report-page.png": 3150, "fleet-page.png": 2500}  # the top of each page, where its pictures are
sys.path.insert(0, str(ROOT))
from tests.helpers.browser import FLAGS  # noqa: E402  (the flags this closed network needs, kept once)

# Without the DevTools pipe the browser tests drive it through: --screenshot needs no driver, and with
# the pipe flag Chromium waits for descriptors 3 and 4 nobody opened (it exits 13).
CHROMIUM_FLAGS = (
    *(flag for flag in FLAGS if flag != "--remote-debugging-pipe"),
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
)


def sdcscan(*args: str, ok: tuple[int, ...] = (0, 1)) -> None:
    """Run this checkout's sdcscan; exit 1 is expected (the pages show failing units)."""
    done = subprocess.run([sys.executable, "-m", "sdcscan", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in ok:
        sys.exit(f"sdcscan {' '.join(args)} exited {done.returncode}:\n{done.stderr}")


def screenshot(browser: str, page: Path, png: Path, height: int, profile: Path) -> None:
    """Chromium's own --screenshot of `page` at WIDTH x `height` (a fresh profile, nothing fetched)."""
    cmd = [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={WIDTH},{height}",
           f"--screenshot={png}", page.resolve().as_uri()]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet", type=Path, help="Directory of the simulated fleet (made there when missing).")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="Where the PNGs go (default: docs/).")
    args = ap.parse_args(argv)
    browser = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if browser is None:
        sys.exit("needs Chromium: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="sdcscan-screenshots-") as tmp_name:
        tmp = Path(tmp_name)
        fleet = args.fleet or tmp / "fleet"
        if not (fleet / "reports").is_dir():
            subprocess.run([sys.executable, str(ROOT / "scripts" / "simulate_fleet.py"), "--hosts", "10000",
                            "--units", "8", "--cases", "100", "--out", str(fleet), "--seed", "1"],
                           check=True, capture_output=True)  # fmt: skip
        run_html, fleet_html = tmp / "report.html", tmp / "fleet.html"
        sdcscan("report", BURNIN, "--html", str(run_html))
        sdcscan("compare", str(fleet / "reports"), "--hosts", str(fleet / "hosts.txt"), "--now", NOW,
                "--html", str(fleet_html))  # fmt: skip
        for html, png in ((run_html, "report-page.png"), (fleet_html, "fleet-page.png")):
            screenshot(browser, html, args.out / png, HEIGHTS[png], tmp / f"profile-{png}")
        print(
            json.dumps(
                {"report_page_bytes": run_html.stat().st_size, "fleet_page_bytes": fleet_html.stat().st_size}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
