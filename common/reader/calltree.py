"""The CPU side of a trace as a call tree: every CPU event (cpu_op, record_function label, python_function, runtime
and driver call) a node with its start, end, name, kind, thread, parent and depth, and the kind of time it is
(common.reader.kinds' roles: compiling, the DataLoader, the optimizer, a sync, a launch, a runtime call).

Each thread's nodes are kept in layers, one per category (Layer): its nodes in start order (the longer first where
two start together) as flat arrays, no object per node; a Node is made only for what a query returns. A trace's
events of one category come in start order on their thread, so a layer is most often its columns as read, checked
in C and not sorted. A layer's nesting (each node's parent among its kind: the op that called an op, the label
around a label) is made when first needed, in one pass with a stack; the whole tree's, across the categories (an op
inside a label inside a python_function), likewise, when a query asks for it. Every query is a binary search over
a layer's sorted starts, then a walk up the parent links (as many steps as the tree is deep) or a slice: the
innermost node open at a time, the top-level nodes of a kind in a window, the nodes of a kind of time overlapping a
window, and each op's self time (its span less the ops it called). There is no look-back window: an op opened long
before the time asked about is found through the parent links. The first few innermost queries of a layer whose
nesting is not made yet scan back in C instead (at most the layer, once each), so that a reader asking three
questions does not pay for a nesting of a million ops: amortised, the queries stay log-time. Pure Python, no torch.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
from array import array
from collections.abc import Callable, Iterator, Sequence

from common.reader.intervals import PACKED, chunked_doubles, doubles, longs, running_max
from common.reader.kinds import CPU_KINDS, DRIVER, LABEL, OP, PYTHON, ROLES, RUNTIME, role_of

# The layers a kind of time can be found in (common.reader.kinds.role_of): ops are ops, labels and python_function
# events the labels' roles, runtime and driver calls the calls' roles.
LAYERS_OF_ROLE = {
    ROLES.index(role): kinds
    for roles, kinds in (
        (("op",), {OP}),
        (("label", "python", "compiling", "DataLoader", "optimizer", "step"), {LABEL, PYTHON}),
        (("runtime call", "launch", "sync"), {RUNTIME, DRIVER}),
    )
    for role in roles
}
SCANS_BEFORE_NESTING = 16  # innermost queries a layer answers by scanning back before it makes its nesting
FEW_THREADS = 8  # up to this many threads, records are grouped by thread a pass per thread, in C
NEAR_NODES = 16  # the next top node is searched among this many nodes after a top one first, then among the rest
START = operator.itemgetter(1)  # of a record (name, start, duration, ...)


class Layer:
    """Nodes of one thread in start order (a parent before its children), as flat arrays, one entry per node: the
    nodes of one category (`kind`), or of several merged (`kinds`, a code per node)."""

    __slots__ = (
        "kind",
        "starts",
        "ends",
        "names",
        "_kinds",
        "_parents",
        "_self",
        "_roles",
        "_tops",
        "_chain",
        "_scans",
        "_reach",
    )

    def __init__(self, kind: int | None, starts: array, ends: array, names: list[str], kinds: bytes | None = None):
        self.kind, self.starts, self.ends, self.names, self._kinds = kind, starts, ends, names, kinds
        self._parents: array | None = None
        self._self: array | None = None
        self._roles: bytes | None = None
        self._tops: dict[object, tuple[array, array, array]] = {}
        self._chain: tuple[array, array, array] | None = None  # the top nodes found so far (tops_in), in start order
        self._scans = 0
        self._reach: array | None = None

    @property
    def reach(self) -> array:
        """The running maximum of the nodes' ends, in start order (ascending: for binary search), made in C once."""
        if self._reach is None:
            self._reach = running_max(self.ends)
        return self._reach

    @classmethod
    def of(cls, kind: int, starts: Sequence[float], ends: Sequence[float], names: list[str]) -> Layer:
        """The layer of one category's nodes given as columns in any order (arrays, or lists: read faster, then
        packed): kept as they are where they come in start order with no shorter node before a longer one at the
        same start (checked in C), else sorted."""
        if all(map(operator.lt, starts, itertools.islice(starts, 1, None))):  # in order, none starting together
            return cls(kind, _packed(starts), _packed(ends), names)
        if any(map(operator.gt, starts, itertools.islice(starts, 1, None))):  # out of order: sort by start
            idx = sorted(range(len(starts)), key=starts.__getitem__)
            begin = [starts[i] for i in idx]
            _longer_first(idx, begin, ends.__getitem__)
            return cls(kind, doubles(begin), doubles([ends[i] for i in idx]), [names[i] for i in idx])
        idx = list(range(len(starts)))  # in order, some starting together: the longer first
        if not _longer_first(idx, starts, ends.__getitem__):  # the longer came first already: the columns as they are
            return cls(kind, _packed(starts), _packed(ends), names)
        return cls(kind, _packed(starts), doubles([ends[i] for i in idx]), [names[i] for i in idx])

    @classmethod
    def of_records(cls, kind: int, records: list[tuple]) -> Layer:
        """The layer of one category's nodes given as records (name, start, duration, ...) in any order: sorted by
        start (a new list: the records' own order is kept) where they do not come in start order with no shorter
        node before a longer one at the same start. The columns are read from the records a slice at a time, so the
        ends' floats (a sum each) are never all alive at once: at 720,720 labels they took 24 MiB at the peak."""
        starts = [record[1] for record in records]
        if not all(map(operator.lt, starts, itertools.islice(starts, 1, None))):  # out of order, or starting together
            records = sorted(records, key=START)  # stable: the order of ties kept, then the longer first
            starts = [record[1] for record in records]
            _longer_first(records, starts, _end_of)
        chunks = range(0, len(records), PACKED)
        ends = chunked_doubles(([r[1] + r[2] for r in records[at : at + PACKED]] for at in chunks), len(records))
        return cls(kind, doubles(starts), ends, [record[0] for record in records])

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def kinds(self) -> bytes:
        """A category code per node (common.reader.kinds.CPU_KINDS)."""
        if self._kinds is None:
            self._kinds = bytes([self.kind]) * len(self)  # type: ignore[list-item]
        return self._kinds

    def kind_of(self, i: int) -> int:
        return self.kind if self.kind is not None else self._kinds[i]  # type: ignore[index]

    @property
    def roles(self) -> bytes:
        """A kind-of-time code per node (common.reader.kinds.ROLES), typed once, when first asked for: once per
        distinct name and category."""
        if self._roles is None and self.kind is not None:  # one category: a name's role looked up in C
            role = {name: role_of(self.kind, name) for name in set(self.names)}
            self._roles = bytes(map(role.__getitem__, self.names))
        if self._roles is None:
            typed: dict[tuple[int, str], int] = {}
            self._roles = bytes(
                typed[key] if (key := (kind, name)) in typed else typed.setdefault(key, role_of(kind, name))
                for kind, name in zip(self.kinds, self.names, strict=True)
            )
        return self._roles

    @property
    def parents(self) -> array:
        """The index of each node's parent in the layer (-1: a root), nested in one pass when first asked for."""
        if self._parents is None:
            self._parents = _nest(self.starts, self.ends)
        return self._parents

    def innermost(self, t: float) -> int:
        """The index of the innermost node open at `t` (start <= t <= end); -1 where none is. From the node started
        last at or before `t`, up its parent links: every node open at `t` is that node or one of its ancestors.
        Before the nesting is made, the first SCANS_BEFORE_NESTING queries scan back for it instead."""
        starts, ends = self.starts, self.ends
        i = bisect.bisect_right(starts, t) - 1
        if i < 0 or ends[i] >= t:
            return i
        if self._parents is None and self._scans < SCANS_BEFORE_NESTING:
            self._scans += 1
            return self._scan_back(i, t)
        parents = self.parents
        while i >= 0 and ends[i] < t:
            i = parents[i]
        return i

    def _scan_back(self, i: int, t: float) -> int:
        """The last node at or before `i` still open at `t` (-1: none), in chunks that double going back, each
        chunk's latest end found in C."""
        ends, hi, size = self.ends, i + 1, 64
        while hi > 0:
            lo = max(0, hi - size)
            if max(ends[lo:hi]) >= t:
                return next(j for j in range(hi - 1, lo - 1, -1) if ends[j] >= t)
            hi, size = lo, size * 2
        return -1

    def ancestor(self, i: int, kind: int | None = None) -> int:
        """The nearest ancestor of node `i` in the layer (of category code `kind`, where given); -1 where none is."""
        parents = self.parents
        i = parents[i]
        while i >= 0 and kind is not None and self.kind_of(i) != kind:
            i = parents[i]
        return i

    def depth(self, i: int) -> int:
        depth, parents = 0, self.parents
        while (i := parents[i]) >= 0:
            depth += 1
        return depth

    def tops(self, mask: bytes | None = None, key: object = None) -> tuple[array, array, array]:
        """The nodes marked in `mask` (a byte per node; None: every node) inside no other marked node: (starts,
        ends, indices), kept under `key`. They do not overlap, so their ends are in order too. In start order (a
        parent before its children), a marked node is inside another marked one where it starts before the last
        top one ends: one pass over the marked nodes alone."""
        if mask is None:  # every node: the chain of top ones, found to its end
            return self._top_chain(math.inf)
        found = self._tops.get(key)
        if found is None:
            starts, ends = self.starts, self.ends
            idx, last_end = array("l"), float("-inf")
            for i in positions(mask, 1):
                if starts[i] >= last_end:
                    idx.append(i)
                    last_end = ends[i]
            found = (array("d", map(starts.__getitem__, idx)), array("d", map(ends.__getitem__, idx)), idx)
            self._tops[key] = found
        return found

    def _top_chain(self, until: float) -> tuple[array, array, array]:
        """The nodes inside no other node (tops' (starts, ends, indices)), found from the first one on as far as the
        first that starts at or after `until`: the next top node is the first one starting at or after the last
        one's end, so the chain is found once, as far as the queries reach (amortised: a bisect per top node, over the
        next NEAR_NODES nodes first, none for a top node with no node inside)."""
        if self._chain is None:
            self._chain = (array("d"), array("d"), array("l"))
        top_starts, top_ends, idx = self._chain
        starts, ends, n = self.starts, self.ends, len(self.starts)
        i = bisect.bisect_left(starts, top_ends[-1], idx[-1] + 1) if idx else 0  # the next top node
        if i < n and starts[i] < until:
            found: list[int] = []
            add, find = found.append, bisect.bisect_left
            while i < n and starts[i] < until:
                add(i)
                end, i = ends[i], i + 1
                if i < n and starts[i] >= end:  # no node inside it: the next node is the next top one
                    continue
                near = i + NEAR_NODES  # its nodes inside it are most often few: searched among the next ones first
                i = find(starts, end, i, near if near < n else n)
                if i == near:
                    i = find(starts, end, near, n)
            idx += longs(found)  # packed at once (an array's append parses each value)
            top_starts += doubles([starts[k] for k in found])
            top_ends += doubles([ends[k] for k in found])
        return self._chain

    def tops_in(self, start: float, end: float) -> tuple[array, array, array]:
        """tops() of every node, of those that end after `start` and start before `end`: (starts, ends, indices),
        with the chain of top nodes found only as far as `end` (_top_chain)."""
        top_starts, top_ends, idx = self._top_chain(end)
        lo, hi = bisect.bisect_right(top_ends, start), bisect.bisect_left(top_starts, end)
        return top_starts[lo:hi], top_ends[lo:hi], idx[lo:hi]

    def self_times(self) -> array:
        """Each node's self time (µs): its span less the spans of the nodes of its kind it called (an op: the
        nearest ops below it, whatever labels lie between). One pass, kept."""
        if self._self is None:
            starts, ends, parents = self.starts, self.ends, self.parents
            own = array("d", map(operator.sub, ends, starts))
            for i, parent in enumerate(parents):
                if parent >= 0:
                    own[parent] -= ends[i] - starts[i]
            self._self = own
        return self._self


EMPTY = Layer(None, array("d"), array("d"), [], b"")


def _packed(values: Sequence[float]) -> array:
    """`values` as an array of doubles: an array as it is, a list packed (common.reader.intervals.doubles)."""
    return values if isinstance(values, array) else doubles(list(values))


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


def _longer_first(items: list, begin: Sequence[float], end_of: Callable[[object], float]) -> bool:
    """Among `items` (sorted by start, `begin`) that start together, put the longer (the later end, `end_of` an
    item) first, in place; whether any moved. Only the runs of equal starts are visited (found in C): they are few."""
    same = itertools.compress(itertools.count(1), map(operator.eq, begin, itertools.islice(begin, 1, None)))
    k = end = -1
    moved = False
    for j in itertools.chain(same, (-1,)):  # begin[j] == begin[j - 1]; -1: past the last run
        if j != end + 1:  # a new run of equal starts, from j - 1 (or none left)
            if end > k:
                run = items[k : end + 1]
                longer = sorted(run, key=end_of, reverse=True)
                if longer != run:
                    items[k : end + 1] = longer
                    moved = True
            k = j - 1
        end = j
    return moved


def _end_of(record: tuple) -> float:
    """A record's (name, start, duration, ...) end."""
    return record[1] + record[2]


class Thread:
    """One CPU thread's nodes: a Layer per category, and the whole tree of several categories merged (made when a
    query asks for it, kept)."""

    __slots__ = ("tid", "layers", "_merged")

    def __init__(self, tid: object, layers: dict[int, Layer]) -> None:
        self.tid, self.layers = tid, layers
        self._merged: dict[frozenset[int], tuple[Layer, list[tuple[int, int]]]] = {}

    def __len__(self) -> int:
        return sum(map(len, self.layers.values()))

    def layer(self, kind: int) -> Layer:
        """The nodes of category code `kind` (an empty layer where the thread has none)."""
        return self.layers.get(kind, EMPTY)

    def merged(self, kinds: frozenset[int] | None = None) -> tuple[Layer, list[tuple[int, int]]]:
        """The nodes of `kinds` (None: every category) as one layer in start order, and for each of its nodes the
        (category code, index in its own layer) it is: sorted when first asked for, kept."""
        key = frozenset(self.layers) if kinds is None else kinds
        found = self._merged.get(key)
        if found is None:
            parts = [(kind, layer) for kind, layer in sorted(self.layers.items()) if kind in key]
            if len(parts) == 1:
                kind, layer = parts[0]
                found = (layer, [(kind, i) for i in range(len(layer))])
            else:
                source = [(kind, i) for kind, layer in parts for i in range(len(layer))]
                starts = array("d", itertools.chain.from_iterable(layer.starts for _, layer in parts))
                ends = array("d", itertools.chain.from_iterable(layer.ends for _, layer in parts))
                names = list(itertools.chain.from_iterable(layer.names for _, layer in parts))
                idx = sorted(range(len(source)), key=starts.__getitem__)
                begin = array("d", map(starts.__getitem__, idx))
                _longer_first(idx, begin, ends.__getitem__)
                merged = Layer(
                    None,
                    begin,
                    array("d", map(ends.__getitem__, idx)),
                    list(map(names.__getitem__, idx)),
                    bytes(source[i][0] for i in idx),
                )
                found = (merged, [source[i] for i in idx])
            self._merged[key] = found
        return found


class Node:
    """One node of the call tree, made on demand: a view of its layer's arrays at `index`, on `thread`."""

    __slots__ = ("thread", "layer", "index")

    def __init__(self, thread: Thread, layer: Layer, index: int) -> None:
        self.thread, self.layer, self.index = thread, layer, index

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.kind}, {self.start}..{self.end}, tid={self.tid!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and (other.thread, other.kind, other.start, other.end, other.name) == (
            self.thread, self.kind, self.start, self.end, self.name
        )  # fmt: skip

    def __hash__(self) -> int:
        return hash((id(self.thread), self.kind, self.start, self.end, self.name))

    @property
    def start(self) -> float:
        return self.layer.starts[self.index]

    @property
    def end(self) -> float:
        return self.layer.ends[self.index]

    @property
    def us(self) -> float:
        return self.end - self.start

    @property
    def name(self) -> str:
        return self.layer.names[self.index]

    @property
    def kind(self) -> str:
        """Its category: cpu_op, user_annotation, python_function, cuda_runtime or cuda_driver."""
        return CPU_KINDS[self.layer.kind_of(self.index)]

    @property
    def role(self) -> str:
        """The kind of time it is (common.reader.kinds.ROLES): its own, typed once per category and name, not its
        whole layer's (a trace's steps are each a name of their own)."""
        layer = self.layer
        roles = layer._roles
        if roles is not None:
            return ROLES[roles[self.index]]
        return ROLES[_role(layer.kind_of(self.index), layer.names[self.index])]

    @property
    def tid(self) -> object:
        return self.thread.tid

    @property
    def up(self) -> Node | None:
        """Its parent among the nodes of its own layer (the label around a label, the op that called an op)."""
        parent = self.layer.parents[self.index]
        return Node(self.thread, self.layer, parent) if parent >= 0 else None

    def _in_tree(self) -> tuple[Layer, int]:
        """The whole tree of its thread (every category merged) and its index there."""
        merged, _ = self.thread.merged()
        lo = bisect.bisect_left(merged.starts, self.start)
        hi = bisect.bisect_right(merged.starts, self.start)
        kind = self.layer.kind_of(self.index)
        i = next(j for j in range(lo, hi) if merged.kinds[j] == kind and merged.names[j] == self.name)
        return merged, i

    @property
    def parent(self) -> Node | None:
        """The node it runs inside, of any category (the innermost enclosing node of its thread's whole tree)."""
        merged, i = self._in_tree()
        parent = merged.parents[i]
        return Node(self.thread, merged, parent) if parent >= 0 else None

    @property
    def depth(self) -> int:
        merged, i = self._in_tree()
        return merged.depth(i)

    @property
    def self_us(self) -> float:
        """Its span less the spans of the nodes of its kind it called (an op: the ops below it)."""
        return self.layer.self_times()[self.index]

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
        self._roles: dict[int, tuple[array, array, list[tuple[Thread, Layer, int]]]] = {}

    def __len__(self) -> int:
        return sum(map(len, self.threads.values()))

    def innermost(self, tid: object, t: float, kinds: frozenset[int] | None = None) -> Node | None:
        """The innermost node open at `t` on thread `tid` (of one of the category codes `kinds`, where given)."""
        thread = self.threads.get(tid)
        if thread is None:
            return None
        one = kinds is not None and len(kinds) == 1
        layer = thread.layer(next(iter(kinds))) if one else thread.merged(kinds)[0]  # type: ignore[arg-type]
        i = layer.innermost(t)
        return Node(thread, layer, i) if i >= 0 else None

    def top_level(self, start: float, end: float, kind: int = OP) -> list[Node]:
        """The nodes of category code `kind` that overlap [start, end] and lie inside no other of that kind on their
        thread, in start order over every thread."""
        found: list[tuple[float, int, Node]] = []
        for n, thread in enumerate(self.threads.values()):
            layer = thread.layer(kind)
            starts, _, idx = layer.tops_in(start, end)
            found += [(begin, n, Node(thread, layer, i)) for begin, i in zip(starts, idx, strict=True)]
        found.sort(key=lambda item: item[:2])
        return [node for _, _, node in found]

    def starting(self, start: float, end: float, kind: int | None = None) -> Iterator[Node]:
        """The nodes (of category code `kind`, where given) that start in [start, end), thread by thread."""
        for thread in self.threads.values():
            layer = thread.layer(kind) if kind is not None else thread.merged()[0]
            lo, hi = bisect.bisect_left(layer.starts, start), bisect.bisect_left(layer.starts, end)
            for i in range(lo, hi):
                yield Node(thread, layer, i)

    def self_us(self, start: float, end: float) -> dict[str, float]:
        """name -> the summed self time of the ops that start in [start, end) (Layer.self_times), on every thread."""
        own: dict[str, float] = {}
        for thread in self.threads.values():
            ops = thread.layer(OP)
            times, names, starts = ops.self_times(), ops.names, ops.starts
            for i in range(bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)):
                own[names[i]] = own.get(names[i], 0.0) + times[i]
        return own

    def _role_index(self, role: int) -> tuple[array, array, list[tuple[Thread, Layer, int]]]:
        """The nodes of `role` on every thread in start order: (starts, the running maximum of their ends, nodes)."""
        found = self._roles.get(role)
        if found is None:
            kinds = LAYERS_OF_ROLE.get(role)
            nodes = sorted(
                (layer.starts[i], n, kind, i)
                for n, thread in enumerate(self.threads.values())
                for kind, layer in thread.layers.items()
                if kinds is None or kind in kinds  # an op is never a label's role: the ops' layer is not typed
                for i in positions(layer.roles, role)
            )
            threads = list(self.threads.values())
            picked = [(threads[n], threads[n].layers[kind], i) for _, n, kind, i in nodes]
            reach = running_max(array("d", [layer.ends[i] for _, layer, i in picked]))
            found = self._roles[role] = (array("d", (start for start, _, _, _ in nodes)), reach, picked)
        return found

    def overlapping(self, start: float, end: float, role: str) -> list[Node]:
        """The nodes of kind of time `role` (a name of common.reader.kinds.ROLES) that overlap (start, end), in start
        order: in each layer that can hold the role, a binary search over the running maximum of its ends and over
        its starts, then each node's role (typed once per name)."""
        code = ROLES.index(role)
        kinds = LAYERS_OF_ROLE.get(code)
        found: list[tuple[float, int, Node]] = []
        for n, thread in enumerate(self.threads.values()):
            for kind, layer in thread.layers.items():
                if kinds is not None and kind not in kinds:
                    continue
                starts, ends, names = layer.starts, layer.ends, layer.names
                for i in range(bisect.bisect_right(layer.reach, start), bisect.bisect_left(starts, end)):
                    if ends[i] > start and _role(kind, names[i]) == code:
                        found.append((starts[i], n, Node(thread, layer, i)))
        found.sort(key=lambda item: item[:2])
        return [node for _, _, node in found]

    def named(self, name: str, kind: int) -> list[Node]:
        """Every node called `name` of category code `kind`, thread by thread in start order."""
        out = []
        for thread in self.threads.values():
            layer = thread.layer(kind)
            out += [Node(thread, layer, i) for i, found in enumerate(layer.names) if found == name]
        return out

    def of_role(self, role: str) -> list[Node]:
        """Every node of kind of time `role`, in start order."""
        return [Node(thread, layer, i) for thread, layer, i in self._role_index(ROLES.index(role))[2]]

    def of_kind(self, kind: int) -> Iterator[Node]:
        """Every node of category code `kind`, thread by thread in start order."""
        for thread in self.threads.values():
            layer = thread.layer(kind)
            for i in range(len(layer)):
                yield Node(thread, layer, i)


@functools.cache
def _role(kind: int, name: str) -> int:
    """role_of, once per category and name."""
    return role_of(kind, name)


def positions(data: bytes, value: int) -> Iterator[int]:
    """The indices of `value` in `data`, found by bytes.find (in C)."""
    needle = bytes([value])
    i = data.find(needle)
    while i >= 0:
        yield i
        i = data.find(needle, i + 1)
