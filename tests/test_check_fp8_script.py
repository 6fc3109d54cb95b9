"""scripts/check_fp8.py, the fp8 slots' exactness check that scripts/gpu_check.sh runs on a lent GPU, run
here on small shapes: every element exact on this CPU (exit 0), and a product wrong in one element is
counted and exits 1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_fp8.py"
ARGS = ["--unit", "cpu:0", "--m", "16", "--inner", "32,64"]
# The shipped product with one element off by one, as a tensor core that rounded a partial sum would give.
ONE_WRONG = """
import runpy, sys
from sdcscan.checks import fp8
shipped = fp8.scaled_mm
def off_by_one(a8, b8, out=None):
    product = shipped(a8, b8)
    product.view(-1)[5] += 1
    return product
fp8.scaled_mm = off_by_one
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _check(*prefix: str) -> tuple[int, list[dict[str, object]]]:
    done = subprocess.run(
        [sys.executable, *prefix, str(SCRIPT), *ARGS],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def test_the_fp8_products_are_exact_on_this_cpu_for_each_slot_path_and_sign() -> None:
    code, rows = _check()
    assert code == 0
    seen = {(r["slot"], r["path"], r["values"], r["k"]) for r in rows if "error" not in r}
    assert len(seen) == 2 * 2 * 2 * 2, rows
    assert all(r["wrong"] == 0 for r in rows if "error" not in r)


def test_a_shipped_product_wrong_in_one_element_is_counted_and_exits_1() -> None:
    code, rows = _check("-c", ONE_WRONG)
    assert code == 1
    shipped = [r for r in rows if r["path"] == "shipped"]
    assert shipped and all(r["wrong"] == 1 and r["max_error"] == 1.0 for r in shipped), shipped
    assert all(r["wrong"] == 0 for r in rows if r["path"] == "fast_accum")
