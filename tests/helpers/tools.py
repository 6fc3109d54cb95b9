"""System tools some tests need (Java for Spark, promtool): skipped where missing, except in CI.

`.ci/run` installs them and sets REQUIRE_TOOLS_ENV, so a missing tool fails there instead of turning the
tests that need it into silent skips.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_TOOLS_ENV = "SDCSCAN_TESTS_REQUIRE_TOOLS"


def missing_tool(what: str, install: str) -> None:
    """Skip the test (or fail it, under `.ci/run`): `what` is not installed; `install` says how to get it."""
    if os.environ.get(REQUIRE_TOOLS_ENV):
        pytest.fail(f"{what} is missing, and {REQUIRE_TOOLS_ENV} says the tests need it ({install})")
    pytest.skip(f"{what} is not installed ({install}); CI runs this test")
