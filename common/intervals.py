"""Time covered by intervals on one clock: the union (time at least one is open) and the overlap of groups.

GPU busy time is the union of the kernel, memcpy and memset intervals of every stream: a moment two streams
are busy counts once. The overlap of streams is the time at least two of them are busy at once. Intervals are
(start, end) pairs in µs; pure Python, no torch.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of `intervals` as disjoint (start, end) pairs in time order; intervals that overlap or touch
    become one."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(start, end) for start, end in out]


def union_us(intervals: Iterable[Interval]) -> float:
    """How long at least one of `intervals` is open (µs): the length of their union. Disjoint intervals add
    their own lengths exactly, so the union of one stream's back-to-back kernels is their sum, to the last bit."""
    total, group_start, group_end, group_sum, size = 0.0, 0.0, -float("inf"), 0.0, 0
    for start, end in sorted(intervals):
        if size and start < group_end:  # overlaps the group: the group's length is its span
            group_end = max(group_end, end)
            size += 1
            continue
        total += _length(group_start, group_end, group_sum, size)
        group_start, group_end, group_sum, size = start, end, end - start, 1
    return total + _length(group_start, group_end, group_sum, size)


def _length(start: float, end: float, single: float, size: int) -> float:
    return 0.0 if size == 0 else single if size == 1 else end - start


def overlap_us(groups: Iterable[Iterable[Interval]]) -> float:
    """How long at least two of `groups` (e.g. the kernels of each stream) are open at once (µs). Each group's
    own intervals are merged first, so a group overlapping itself counts as one."""
    edges: list[tuple[float, int]] = []
    for group in groups:
        for start, end in merged(group):
            edges += [(start, 1), (end, -1)]
    edges.sort()  # at one moment an end (-1) sorts before a start (+1): touching intervals do not overlap
    total, depth, since = 0.0, 0, 0.0
    for time, step in edges:
        if depth >= 2:
            total += time - since
        depth += step
        since = time
    return total
