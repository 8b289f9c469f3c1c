"""Times and sizes a person can read: three significant figures in the unit that fits (µs, ms, s; B, KB, MB, GB).

A duration shorter than the profiler's clock can measure (its timestamps count nanoseconds) reads "< 1 ns", never
a figure with hundreds of decimals (a subnormal 5e-324 µs)."""

from __future__ import annotations

import math

CLOCK_US = 1e-3  # the profiler's tick: Kineto's timestamps count nanoseconds


def _sig3(value: float) -> str:
    """`value` with three significant figures, without an exponent: 1.23, 12.3, 123, 1230."""
    if value == 0 or not math.isfinite(value) or not 1e-3 <= abs(value) < 1e6:
        return f"{value:.3g}"  # at most 9 characters; never hundreds of decimals
    value = float(f"{value:.3g}")  # round first, so 0.9996 reads 1.00, not 1.000
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


def human_time(us: float | None) -> str:
    """A duration given in microseconds, in µs, ms or s (three significant figures); '—' for None or NaN, "< 1 ns"
    (or "> -1 ns") for one shorter than the clock's tick, CLOCK_US."""
    if us is None or math.isnan(us):
        return "—"
    if math.isinf(us):
        return "∞ s" if us > 0 else "-∞ s"
    size = abs(us)
    if 0 < size < CLOCK_US:
        return "< 1 ns" if us > 0 else "> -1 ns"
    if size >= 999.5e3:
        return f"{_sig3(us / 1e6)} s"
    if size >= 999.5:
        return f"{_sig3(us / 1e3)} ms"
    return f"{_sig3(us)} µs"


def human_bytes(n: float | None) -> str:
    """A byte count in B, KB, MB or GB (decimal units, three significant figures); '—' for None or NaN."""
    if n is None or math.isnan(n):
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= 0.9995 * scale:
            return f"{_sig3(n / scale)} {unit}"
    return f"{n:,.0f} B"
