"""Time covered by intervals on one clock: the union (time at least one is open) and the overlap of groups.

GPU busy time is the union of the kernel, memcpy and memset intervals of every stream: a moment two streams
are busy counts once. The overlap of streams is the time at least two of them are busy at once. Intervals are
(start, end) pairs in µs; pure Python, no torch. A trace's clock reads about 1e12 µs, where a double resolves only
about 1e-3 µs: subtract the first start before building the intervals, so each one's length stays exact.
"""

from __future__ import annotations

import itertools
import operator
import struct
from array import array
from collections.abc import Iterable, Sequence

Interval = tuple[float, float]
FIRST, SECOND = operator.itemgetter(0), operator.itemgetter(1)


def merged(intervals: Iterable[Interval], touch: float = 0.0) -> list[Interval]:
    """The union of `intervals` as disjoint (start, end) pairs in time order: the one union of the reader and the
    analysis (union_sorted, once they are sorted). Intervals that overlap, touch, or lie less than `touch` apart
    become one."""
    spans = sorted(intervals)
    starts, ends, _ = union_sorted(list(map(FIRST, spans)), list(map(SECOND, spans)), touch)
    return list(zip(starts, ends, strict=True))


PACKED = 1 << 14  # floats packed at once: a longer list is packed a slice at a time (doubles)


def doubles(values: list[float]) -> array:
    """The floats of the list `values` as an array of doubles, packed in C: array("d", values) converts them one at
    a time through its format parser, 2-3 times the cost (6 times from an iterator). A list longer than PACKED goes
    a slice at a time, so the call's arguments hold no more than PACKED of its floats a second time."""
    if len(values) <= PACKED:
        out = array("d")
        out.frombytes(struct.pack(f"{len(values)}d", *values))
        return out
    return chunked_doubles((values[at : at + PACKED] for at in range(0, len(values), PACKED)), len(values))


def chunked_doubles(chunks: Iterable[list[float]], size: int) -> array:
    """An array of `size` doubles packed from `chunks`, lists of floats (`size` of them in all), each in turn into
    its place in C: only one chunk's floats are alive at once, wherever they come from (sums made for the chunk)."""
    out = array("d", (0.0,)) * size
    at = 0
    for chunk in chunks:
        struct.pack_into(f"{len(chunk)}d", out, at, *chunk)
        at += 8 * len(chunk)
    return out


def longs(values: list[int]) -> array:
    """The ints of the list `values` as an array of C longs, packed at once (doubles says why)."""
    out = array("l")
    out.frombytes(struct.pack(f"{len(values)}l", *values))
    return out


def running_max(ends: Sequence[float]) -> array:
    """The running maximum of `ends` (the latest end up to each interval; ascending, for binary search): a copy
    where they never go down (the intervals of one stream, one after another, checked in C with one comparison
    each), else one comparison each in a loop (a `max` call each costs several times that)."""
    if all(map(operator.le, ends, itertools.islice(ends, 1, None))):
        return array("d", ends) if isinstance(ends, array) else doubles(list(ends))
    return doubles(running_max_list(ends))


def running_max_list(ends: Sequence[float]) -> list[float]:
    """itertools.accumulate(ends, max) as a list, each step a comparison (max(a, b) keeps a unless b > a)."""
    out = [top := ends[0]]
    add = out.append
    for end in itertools.islice(ends, 1, None):
        if end > top:
            top = end
        add(top)
    return out


def union_sorted(
    starts: Sequence[float], ends: Sequence[float], touch: float = 0.0, reach: Sequence[float] | None = None
) -> tuple[array, array, array]:
    """The union of intervals given in start order (`starts`, `ends`; `reach`, the running maximum of the ends,
    where known), in C: an interval of the union opens at each one that starts more than `touch` after every
    earlier one has ended, and closes at the latest end before the next one opens. (starts, ends, and the index of
    the interval each one of the union opens with.) Lists are read faster than arrays (no float made per read)."""
    if not starts:
        return array("d"), array("d"), array("l")
    if reach is None:
        reach = running_max_list(ends)  # the latest end up to each: ascending
    # a byte per interval after the first: 1 where it opens an interval of the union
    reached = map(operator.add, reach, itertools.repeat(touch))
    later = bytes(map(operator.gt, itertools.islice(starts, 1, None), reached))
    if 0 not in later:  # none overlaps or touches one before it (one stream's ops, say): each is one of the union
        return _doubles(starts), _doubles(reach), longs(list(range(len(starts))))
    firsts = longs([0, *itertools.compress(itertools.count(1), later)])
    lasts = doubles(list(itertools.compress(reach, itertools.chain(later, (1,)))))  # each closes before the next opens
    return doubles(list(itertools.compress(starts, itertools.chain((1,), later)))), lasts, firsts


def _doubles(values: Sequence[float]) -> array:
    """A new array of doubles of `values`: a copy of an array, packed from anything else (doubles)."""
    return array("d", values) if isinstance(values, array) else doubles(list(values))


def union_us(intervals: Iterable[Interval]) -> float:
    """How long at least one of `intervals` is open (µs): the length of their union."""
    return sum(end - start for start, end in merged(intervals))


def exposed_us(these: Iterable[Interval], others: Iterable[Interval]) -> float:
    """How long at least one of `these` is open while none of `others` is (µs): communication no other GPU work
    hides, say. The union of both less the union of `others`."""
    others = list(others)
    return union_us([*these, *others]) - union_us(others)


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
