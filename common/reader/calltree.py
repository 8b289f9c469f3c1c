"""The CPU side of a trace as a call tree: every CPU event (cpu_op, record_function label, python_function, runtime
and driver call) a node with its start, end, name, kind, thread, parent and depth, and the kind of time it is
(common.reader.kinds' roles: compiling, the DataLoader, the optimizer, a sync, a launch, a runtime call).

Built once, in one pass per thread: the thread's events sorted by start (the longer first where two start
together), then a stack of the nodes still open gives each its parent. The nodes live in flat arrays per thread,
no object per node; a Node is made only for what a query returns. Every query is a binary search over a thread's
sorted starts, then a walk up the parent links (as many steps as the tree is deep) or a slice: the innermost node
open at a time, the top-level nodes of a kind in a window, the nodes of a kind of time overlapping a window, and
each op's self time (its span less the ops it called). There is no look-back window: an op opened long before the
time asked about is found through the parent links. Pure Python, no torch.
"""

from __future__ import annotations

import bisect
import itertools
import operator
from array import array
from collections.abc import Iterator, Sequence

from common.reader.kinds import CPU_KINDS, OP, ROLES, role_of

FEW_THREADS = 8  # up to this many threads, a trace's events are grouped by thread a pass per thread, in C


class Thread:
    """One CPU thread's nodes, in start order (a parent before its children): flat arrays, one entry per node."""

    __slots__ = ("tid", "starts", "ends", "names", "kinds", "_roles", "_parents", "_self", "_tops", "_kind_mask")

    starts: array  # µs, ascending
    ends: array
    names: list[str]
    kinds: bytes  # a category code per node (common.reader.kinds.CPU_KINDS)

    def __init__(self, tid: object, starts: array, ends: array, names: list[str], kinds: bytes) -> None:
        self.tid = tid
        self.starts, self.ends, self.names, self.kinds = starts, ends, names, kinds
        self._roles: bytes | None = None
        self._parents: array | None = None
        self._self: array | None = None
        self._tops: dict[object, tuple] = {}  # tops and subtrees, by their key
        self._kind_mask: dict[int, bytes] = {}

    @property
    def roles(self) -> bytes:
        """A kind-of-time code per node (common.reader.kinds.ROLES), typed once, when first asked for."""
        if self._roles is None:
            self._roles = bytes(map(role_of, self.kinds, self.names))
        return self._roles

    @property
    def parents(self) -> array:
        """The index of each node's parent (-1: a root), nested in one pass when first asked for (_nest)."""
        if self._parents is None:
            self._parents = _nest(self.starts, self.ends)
        return self._parents

    def __len__(self) -> int:
        return len(self.starts)

    def innermost(self, t: float, kinds: frozenset[int] | None = None) -> int:
        """The index of the innermost node open at `t` (start <= t <= end), of one of `kinds` where given; -1 where
        none is. From the node started last at or before `t`, up its parent links: every node open at `t` is that
        node or one of its ancestors. With `kinds`, the same over the nodes of those kinds alone (nested among
        themselves once, when first asked: the innermost op open at `t` is the same in either tree)."""
        if kinds is None:
            starts, ends, parents, idx = self.starts, self.ends, self.parents, None
        else:
            starts, ends, parents, idx = self._subtree(kinds)
        i = bisect.bisect_right(starts, t) - 1
        while i >= 0 and ends[i] < t:
            i = parents[i]
        return i if idx is None or i < 0 else idx[i]

    def _subtree(self, kinds: frozenset[int]) -> tuple[array, array, array, array]:
        """The nodes of `kinds` alone, nested among themselves: (starts, ends, parents, their indices)."""
        found = self._tops.get(kinds)
        if found is None:
            idx = array("l", (i for kind in kinds for i in positions(self.mask(kind), 1)))
            if len(kinds) > 1:
                idx = array("l", sorted(idx))
            starts = array("d", (self.starts[i] for i in idx))
            ends = array("d", (self.ends[i] for i in idx))
            found = self._tops[kinds] = (starts, ends, _nest(starts, ends), idx)  # type: ignore[assignment]
        return found  # type: ignore[return-value]

    def ancestor(self, i: int, kind: int) -> int:
        """The nearest ancestor of node `i` of category code `kind`; -1 where none is."""
        parents, kinds = self.parents, self.kinds
        i = parents[i]
        while i >= 0 and kinds[i] != kind:
            i = parents[i]
        return i

    def depth(self, i: int) -> int:
        depth, parents = 0, self.parents
        while (i := parents[i]) >= 0:
            depth += 1
        return depth

    def mask(self, kind: int) -> bytes:
        """A byte per node: 1 where the node is of category code `kind` (for itertools.compress, in C)."""
        found = self._kind_mask.get(kind)
        if found is None:
            table = bytes(int(k == kind) for k in range(256))
            found = self._kind_mask[kind] = self.kinds.translate(table)
        return found

    def tops(self, mask: bytes, key: object) -> tuple[array, array, array]:
        """The nodes marked in `mask` (a byte per node, as `mask` makes) inside no other marked node: (starts, ends,
        indices), kept under `key`. They do not overlap, so their ends are in order too. In start order (a parent
        before its children), a marked node is inside another marked one where it starts before the last top one
        ends: one pass over the marked nodes alone."""
        found = self._tops.get(key)
        if found is None:
            starts, ends = self.starts, self.ends
            idx, last_end = array("l"), float("-inf")
            for i in positions(mask, 1):
                if starts[i] >= last_end:
                    idx.append(i)
                    last_end = ends[i]
            found = self._tops[key] = (
                array("d", (starts[i] for i in idx)),
                array("d", (ends[i] for i in idx)),
                idx,
            )
        return found

    def self_times(self) -> array:
        """Each node's self time (µs): for an op, its span less the spans of the ops it called (the nearest ops
        below it, whatever labels lie between); for another node, its span. One pass, kept."""
        if self._self is None:
            starts, ends, kinds = self.starts, self.ends, self.kinds
            own = array("d", (end - start for start, end in zip(starts, ends, strict=True)))
            for i in range(len(own)):
                if kinds[i] == OP and (a := self.ancestor(i, OP)) >= 0:
                    own[a] -= ends[i] - starts[i]
            self._self = own
        return self._self


def _nest(starts: array, ends: array) -> array:
    """Each node's parent (-1: a root), the node open when it starts, from a stack of the open nodes. A node that
    starts where another ends (touching) is not inside it; a node that ends after its parent is taken as ending
    with it, so the stack's ends never grow upward and a later node is never put inside a node already ended."""
    parents = array("l", bytes(len(starts) * array("l").itemsize))
    open_ends: list[float] = []
    open_idx: list[int] = []
    pop_end, pop_idx, push_end, push_idx = open_ends.pop, open_idx.pop, open_ends.append, open_idx.append
    for i, start in enumerate(starts):
        while open_ends and open_ends[-1] <= start:
            pop_end()
            pop_idx()
        end = ends[i]
        if open_ends:
            parents[i] = open_idx[-1]
            if end > open_ends[-1]:  # it outlives its parent (a clock's rounding): cut to it, for the nesting only
                end = open_ends[-1]
        else:
            parents[i] = -1
        push_end(end)
        push_idx(i)
    return parents


class Node:
    """One node of the call tree, made on demand: a view of its thread's arrays at `index`."""

    __slots__ = ("thread", "index")

    def __init__(self, thread: Thread, index: int) -> None:
        self.thread, self.index = thread, index

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.kind}, {self.start}..{self.end}, tid={self.tid!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and other.thread is self.thread and other.index == self.index

    def __hash__(self) -> int:
        return hash((id(self.thread), self.index))

    @property
    def start(self) -> float:
        return self.thread.starts[self.index]

    @property
    def end(self) -> float:
        return self.thread.ends[self.index]

    @property
    def us(self) -> float:
        return self.end - self.start

    @property
    def name(self) -> str:
        return self.thread.names[self.index]

    @property
    def kind(self) -> str:
        """Its category: cpu_op, user_annotation, python_function, cuda_runtime or cuda_driver."""
        return CPU_KINDS[self.thread.kinds[self.index]]

    @property
    def role(self) -> str:
        """The kind of time it is (common.reader.kinds.ROLES)."""
        return ROLES[self.thread.roles[self.index]]

    @property
    def tid(self) -> object:
        return self.thread.tid

    @property
    def parent(self) -> Node | None:
        parent = self.thread.parents[self.index]
        return Node(self.thread, parent) if parent >= 0 else None

    @property
    def depth(self) -> int:
        return self.thread.depth(self.index)

    @property
    def self_us(self) -> float:
        return self.thread.self_times()[self.index]

    def ancestors(self) -> Iterator[Node]:
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


class CallTree:
    """Every CPU thread's nodes (Thread), and the queries the analysis asks of them."""

    __slots__ = ("threads", "_roles")

    def __init__(self, threads: dict[object, Thread]) -> None:
        self.threads = threads
        self._roles: dict[int, tuple[array, array, list[tuple[Thread, int]]]] = {}

    def __len__(self) -> int:
        return sum(map(len, self.threads.values()))

    @classmethod
    def build(
        cls, names: list[str], starts: Sequence[float], durs: Sequence[float], tids: list[object], kinds: bytearray
    ) -> CallTree:
        """The tree of the events given as parallel columns (name, start, duration, thread, category code), in any
        order. Each thread's are sorted by start, the longer first at one start (two C sorts, no Python per
        event), then nested in one pass."""
        by_tid: dict[object, list[int]] = {}
        distinct = dict.fromkeys(tids)  # in order of first appearance
        if len(distinct) == 1:
            by_tid[next(iter(distinct))] = list(range(len(tids)))
        elif len(distinct) <= FEW_THREADS:  # a pass per thread, in C
            for tid in distinct:
                by_tid[tid] = list(itertools.compress(itertools.count(), map(operator.eq, tids, itertools.repeat(tid))))
        else:
            for i, tid in enumerate(tids):
                by_tid.setdefault(tid, []).append(i)
        threads = {}
        for tid, idx in by_tid.items():
            idx.sort(key=starts.__getitem__)  # a trace's events come nearly in order: one sort, mostly merging runs
            begin = array("d", map(starts.__getitem__, idx))
            if any(map(operator.eq, begin, begin[1:])):  # events that start together: the longer first
                _longer_first(idx, begin, durs)
            end = array("d", map(operator.add, begin, map(durs.__getitem__, idx)))
            threads[tid] = Thread(
                tid, begin, end, list(map(names.__getitem__, idx)), bytes(map(kinds.__getitem__, idx))
            )
        return cls(threads)

    def innermost(self, tid: object, t: float, kinds: frozenset[int] | None = None) -> Node | None:
        """The innermost node open at `t` on thread `tid` (of one of the category codes `kinds`, where given)."""
        thread = self.threads.get(tid)
        if thread is None:
            return None
        i = thread.innermost(t, kinds)
        return Node(thread, i) if i >= 0 else None

    def top_level(self, start: float, end: float, kind: int = OP) -> list[Node]:
        """The nodes of category code `kind` that overlap [start, end] and lie inside no other of that kind on their
        thread, in start order over every thread."""
        found: list[tuple[float, int, Node]] = []
        for n, thread in enumerate(self.threads.values()):
            starts, ends, idx = thread.tops(thread.mask(kind), kind)
            lo = bisect.bisect_right(ends, start)  # the first ending after `start`
            hi = bisect.bisect_left(starts, end)
            found += [(starts[j], n, Node(thread, idx[j])) for j in range(lo, hi)]
        found.sort(key=lambda item: item[:2])
        return [node for _, _, node in found]

    def starting(self, start: float, end: float, kind: int | None = None) -> Iterator[Node]:
        """The nodes (of category code `kind`, where given) that start in [start, end), thread by thread."""
        for thread in self.threads.values():
            lo, hi = bisect.bisect_left(thread.starts, start), bisect.bisect_left(thread.starts, end)
            for i in range(lo, hi):
                if kind is None or thread.kinds[i] == kind:
                    yield Node(thread, i)

    def names_in(self, thread: Thread, lo: int, hi: int, kind: int = OP) -> Iterator[str]:
        """The names of `thread`'s nodes lo..hi-1 of category code `kind`, filtered in C (for a Counter)."""
        return itertools.compress(thread.names[lo:hi], thread.mask(kind)[lo:hi])

    def self_us(self, start: float, end: float) -> dict[str, float]:
        """name -> the summed self time of the ops that start in [start, end) (Thread.self_times), on every thread."""
        own: dict[str, float] = {}
        for thread in self.threads.values():
            times, names, kinds, starts = thread.self_times(), thread.names, thread.kinds, thread.starts
            for i in range(bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)):
                if kinds[i] == OP:
                    own[names[i]] = own.get(names[i], 0.0) + times[i]
        return own

    def _role_index(self, role: int) -> tuple[array, array, list[tuple[Thread, int]]]:
        """The nodes of `role` on every thread in start order: (starts, the running maximum of their ends, nodes)."""
        found = self._roles.get(role)
        if found is None:
            nodes = sorted(
                ((thread.starts[i], n, i) for n, thread in enumerate(self.threads.values())
                 for i in positions(thread.roles, role)),
            )  # fmt: skip
            threads = list(self.threads.values())
            reach, most = array("d"), float("-inf")
            for _, n, i in nodes:
                most = max(most, threads[n].ends[i])
                reach.append(most)
            found = self._roles[role] = (
                array("d", (start for start, _, _ in nodes)),
                reach,
                [(threads[n], i) for _, n, i in nodes],
            )
        return found

    def overlapping(self, start: float, end: float, role: str) -> list[Node]:
        """The nodes of kind of time `role` (a name of common.reader.kinds.ROLES) that overlap (start, end), in start
        order: a binary search over their running maximum end, then over their starts."""
        starts, reach, nodes = self._role_index(ROLES.index(role))
        lo, hi = bisect.bisect_right(reach, start), bisect.bisect_left(starts, end)
        out = []
        for thread, i in nodes[lo:hi]:
            if thread.ends[i] > start:
                out.append(Node(thread, i))
        return out

    def named(self, name: str, kind: int) -> list[Node]:
        """Every node called `name` of category code `kind`, thread by thread in start order."""
        return [Node(thread, i) for thread in self.threads.values() for i in positions(thread.mask(kind), 1)
                if thread.names[i] == name]  # fmt: skip

    def of_role(self, role: str) -> list[Node]:
        """Every node of kind of time `role`, in start order."""
        return [Node(thread, i) for thread, i in self._role_index(ROLES.index(role))[2]]


def _longer_first(idx: list[int], begin: array, durs: Sequence[float]) -> None:
    """Among the events of `idx` (sorted by start, `begin`) that start together, put the longer first, in place.
    Only the runs of equal starts are visited (found in C): they are few."""
    same = itertools.compress(itertools.count(1), map(operator.eq, begin, begin[1:]))  # j: begin[j] == begin[j - 1]
    k = end = -1
    for j in same:
        if j != end + 1:  # a new run of equal starts, from j - 1
            if end > k:
                idx[k : end + 1] = sorted(idx[k : end + 1], key=durs.__getitem__, reverse=True)
            k = j - 1
        end = j
    if end > k >= 0:
        idx[k : end + 1] = sorted(idx[k : end + 1], key=durs.__getitem__, reverse=True)


def positions(data: bytes, value: int) -> Iterator[int]:
    """The indices of `value` in `data`, found by bytes.find (in C)."""
    needle = bytes([value])
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)
