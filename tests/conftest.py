"""The suite's hooks: a test that uses a slow module fixture (one that starts torchrun, say) is slow too, and a
script a test started and left running ends with the test.

pytest ignores marks on fixtures, so a test module names its slow fixtures in `SLOW_FIXTURES`, and every test that
asks for one of them, directly or through another fixture, gets the `slow` mark: `-m "not slow"` then leaves out
the fixture's launch as well as the tests that read it.
"""

from __future__ import annotations

import os

import pytest
from helpers import end_started

# A verdict that breaks one of its invariants (common.analysis.invariants) fails the test that printed it, where a
# user's run gets one "internal check" note; set before any test, so the scripts and workers a test starts inherit it.
os.environ["PROFILING_STRICT_CHECKS"] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        slow = getattr(item.module, "SLOW_FIXTURES", ())
        if slow and set(slow) & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _end_started_scripts():
    """A script a test started (helpers.start_script) and left running is ended with the test."""
    yield
    end_started()
