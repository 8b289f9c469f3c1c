"""Times and sizes are printed with a unit that fits and three significant figures."""

from __future__ import annotations

import pytest

from common.units import human_bytes, human_time


@pytest.mark.parametrize(
    "us, text",
    [
        (0.5, "0.500 µs"),
        (12.345, "12.3 µs"),
        (999.4, "999 µs"),
        (999.6, "1.00 ms"),
        (57682901.7, "57.7 s"),
        (32085654, "32.1 s"),
        (1234.5, "1.23 ms"),
        (None, "—"),
        (float("inf"), "∞ s"),
        (1e308, "1e+302 s"),
    ],
)
def test_a_time_is_printed_in_the_unit_that_fits(us, text):
    assert human_time(us) == text


@pytest.mark.parametrize("n, text", [(512, "512 B"), (13_000, "13.0 KB"), (604.0e6, "604 MB"), (8.7577e9, "8.76 GB")])
def test_a_size_is_printed_in_the_unit_that_fits(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize("us, text", [(5e-324, "< 1 ns"), (1e-4, "< 1 ns"), (-2e-310, "> -1 ns"), (0.0, "0 µs")])
def test_a_time_below_the_clocks_tick_is_said_below_it(us, text):
    assert human_time(us) == text
