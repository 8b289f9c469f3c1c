"""What changed between two traces: the posts' method (04_a vs 04_b, math vs flash, eager vs compiled) in one command.

Usage:
    uv run python -m common.diff traces/04_a_naive_attention/<tag>.json traces/04_b_inplace_ops_attention/<tag>.json
    uv run python -m common.diff A.json B.json --markdown

Leads with what bounds each trace (common.analysis.diagnosis: "bound: CPU → GPU", between two CPU-only traces which
kind of CPU-bound: "bound: CPU, overhead-bound → compute-bound"; and each verdict), then compares trace A with trace B
step for step: per-step figures are the median (counts) or the mean (a kernel's time: its total over the steps / the
steps) over each trace's profiled steps. Prints a one-sentence headline, the totals, the kernels added, removed or
changed, the CPU ops added or removed, and the runtime calls whose counts changed. Kernels are paired by their exact
name first; then, within a family, by their short name, the instantiations of one template chosen among by their calls
and time; then by a close name: more than half of the words that say what they compute in common (MulFunctor never
pairs with FillFunctor, nor triton_poi_fused_add_mul with triton_poi_fused_add_sum); a gemm, attention or softmax
kernel left alone on each side pairs too, so an A100 and an H200 trace of one script pair their GEMMs; two kernels of
other names pair only where their calls per step agree within 2× (never a GEMM called 38× as often). Thousands of
kernels of the same words (a recompiled model's renumbered `triton_poi_fused_add_mul_<n>`) pair in the order of their
time, in memory linear in their number. The rest are gone or new. The table shows both names of a pair of other
names, and lists them in full under it. A copy pairs only with a copy the same way (never DtoH with DtoD), a backward
kernel only with a backward one, and the headline calls a kernel whose template runs in both traces "one
instantiation of", never gone or new. Different scripts or shapes are compared anyway, and said. No torch: it reads
the JSON, an event at a time (one larger than 64 MiB is refused, naming the byte where it starts).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import re
import textwrap
from collections import Counter, defaultdict
from pathlib import Path

from common import interrupts
from common.analysis.diagnosis import bound_lines, diagnose
from common.analysis.figures import Row, launch_line, summarize
from common.analysis.invariants import invariant_notes
from common.analysis.tables import DASH, TEXT_WIDTH, fit_last_column, num, printable, table
from common.cli import REGION_HELP, OneLineParser, SuiteError, cli
from common.files import not_a_file
from common.reader.build import read_trace
from common.reader.model import GpuOp, KernelUse, Trace, median_of
from common.reader.naming import cut_name, short_name
from common.units import human_time

CLOSE_NAME = 0.5  # two kernels of one family are one kernel past this share of words in common (Dice)
ONE_JOB = ("gemm", "attention", "softmax")  # families whose lone kernel on each side is the same work, any name
ALL_PAIRS = 4096  # a word set shared by more kernels than make this many pairs is paired in order (same_words)
SAME_CALLS = 2.0  # two kernels of other names pair only where one's calls per step are within 2× of the other's
ASSIGN_EXACTLY = 7  # instantiations of one template on the shorter side up to which every pairing is tried
_COPY = re.compile(r"Memcpy (\w+)")


def _short(op: GpuOp) -> str:
    return _short_of(op.name)


@functools.cache  # the pairing asks for a kernel's short name many times
def _short_of(name: str) -> str:
    return short_name(name, 200)


def _direction(op: GpuOp) -> str | None:
    """A copy's direction (`HtoD`, `DtoH`, `DtoD`, `PtoP`, ...) from its name; None for anything else."""
    found = _COPY.match(op.name) if op.category == "gpu_memcpy" else None
    return found.group(1) if found else None


def _may_pair(u: KernelUse, v: KernelUse) -> bool:
    """Two uses that may be the same work: a copy only with a copy the same way."""
    return _direction(u.op) == _direction(v.op)


def _cost(u: KernelUse, v: KernelUse) -> float:
    """How unlike two uses are: the relative differences of their calls and of their time per step, added."""

    def apart(x: float, y: float) -> float:
        return abs(x - y) / max(abs(x), abs(y), 1e-9)

    return apart(u.calls, v.calls) + apart(u.us, v.us)


def _assign(left: list[KernelUse], right: list[KernelUse]) -> list[tuple[int, int]]:
    """Pairs (i, j) of `left` and `right`, as many as the shorter side has, of the least total _cost: every
    assignment tried where the shorter side has up to ASSIGN_EXACTLY, else the cheapest pair first, then the next."""
    flip = len(left) > len(right)
    short, long = (right, left) if flip else (left, right)
    cost = [[_cost(a, b) for b in long] for a in short]
    if len(short) <= ASSIGN_EXACTLY and math.perm(len(long), len(short)) <= 50_000:
        best = min(
            itertools.permutations(range(len(long)), len(short)),
            key=lambda cols: sum(cost[i][j] for i, j in enumerate(cols)),
        )
        pairs = list(enumerate(best))
    else:
        pairs, used_i, used_j = [], set(), set()
        for _, i, j in sorted((cost[i][j], i, j) for i in range(len(short)) for j in range(len(long))):
            if i not in used_i and j not in used_j:
                pairs.append((i, j))
                used_i.add(i)
                used_j.add(j)
    return [(j, i) for i, j in pairs] if flip else pairs


# Words that say how a kernel runs, not what it computes: ATen's namespaces and generic wrappers, the suffixes of
# its functors, Inductor's `triton_poi_fused_` (pointwise, reduction, persistent, template). Numbers go too.
_HOW = frozenset({
    "void", "at", "native", "anonymous", "namespace", "std", "c10", "detail", "internal", "kernel", "kernels",
    "functor", "impl", "cuda", "vectorized", "unrolled", "elementwise", "op", "triton", "poi", "red", "per", "tem",
    "fused",
})  # fmt: skip
_BACKWARD = frozenset({"backward", "bwd", "bprop"})
_WORD_OF = re.compile(r"[A-Z]+[0-9]*(?![a-z])|[A-Z]?[a-z]+(?:[0-9]+[a-z]*)*|[0-9]+(?:[a-z]+[0-9]*)*")
_SHOWN_HINT = re.compile(r"<…([^<>…]+)…>")  # short_name's `<…MulFunctor…>`


@functools.cache  # one trace's kernels are few; a recompiled model's thousands are each seen once per side
def words(short: str) -> frozenset[str]:
    """The words of a kernel's short name that say what it computes: its hints where it has some (ATen's generic
    kernels: `at::native::vectorized_elementwise_kernel<…MulFunctor…>` is {mul}), else the name; split at every
    non-alphanumeric and camelCase (`GeluBackwardCUDAKernelImpl`: gelu, backward), lower case, without numbers and
    the words in _HOW (`triton_poi_fused_add_mul_0` is {add, mul})."""
    hints = _SHOWN_HINT.findall(short)
    found = _WORD_OF.findall(" ".join(hints) if hints else short)
    return frozenset(w for w in map(str.lower, found) if not w.isdigit() and w not in _HOW)


def similarity(x: frozenset[str], y: frozenset[str]) -> float:
    """The share of words two names have in common (Dice: 2 |x ∩ y| / (|x| + |y|)); 0 where either has none."""
    return 2 * len(x & y) / (len(x) + len(y)) if x and y else 0.0


def _calls_agree(u: KernelUse, v: KernelUse) -> bool:
    """Two uses of other names whose calls per step agree within SAME_CALLS (2×) of each other: the same work made
    as often. A100 and V100 GEMMs of one name's words called 19 to 38 times as often on one side are other work;
    paired, one GEMM seemed to slow down 100 to 180 times."""
    few, many = sorted((u.calls, v.calls))
    return many <= SAME_CALLS * few


def _same_way(u: KernelUse, v: KernelUse) -> bool:
    """Two uses that may be the same work: a copy only with a copy the same way, a backward kernel (its name says
    backward, bwd or bprop) only with a backward one."""
    return _may_pair(u, v) and bool(words(_short(u.op)) & _BACKWARD) == bool(words(_short(v.op)) & _BACKWARD)


def _need(size: int) -> int:
    """The fewest words a name of `size` words must share with another for a similarity above CLOSE_NAME."""
    return math.floor(CLOSE_NAME * size / (2 - CLOSE_NAME)) + 1


def close_pairs(left: list[frozenset[str]], right: list[frozenset[str]]) -> list[tuple[float, int, int]]:
    """Every (similarity, i, j) above CLOSE_NAME of `left[i]` and `right[j]`: what scoring every pair finds, without
    scoring them all (prefix filtering). With each name's words ordered rarest first, two names that share at least
    k words share one within the first len - k + 1 words of each; k is at least _need of either's size. So only
    the names that share one of those first words are scored, and the commonest words (add, mul), last in that
    order, are left out of most prefixes."""
    seen = Counter(w for names in (left, right) for x in names for w in x)

    def prefix(x: frozenset[str]) -> list[str]:
        return sorted(x, key=lambda w: (seen[w], w))[: len(x) - _need(len(x)) + 1]

    index: dict[str, list[int]] = defaultdict(list)
    for j, y in enumerate(right):
        for w in prefix(y):
            index[w].append(j)
    found = []
    sizes = [len(y) for y in right]
    for i, x in enumerate(left):
        a = len(x)
        candidates = {j for w in prefix(x) for j in index.get(w, ())}
        for j in candidates:  # 2 |x ∩ y| / (a + b) > CLOSE_NAME
            both = a + sizes[j]
            shared = len(x & right[j])
            if 2 * shared > CLOSE_NAME * both:
                found.append((2 * shared / both, i, j))
    return found


def _pair_closest(
    close: list[tuple[float, int, int]], left: list[KernelUse], right: list[KernelUse], pairs: list
) -> tuple[set[int], set[int]]:
    """Adds to `pairs` the closest pairs of `close` first, the nearer calls and time among equals, each use once;
    returns the indices of `left` and `right` so paired."""
    used_l, used_r = set(), set()
    for _, _, i, j in sorted((-score, _cost(left[i], right[j]), i, j) for score, i, j in close):
        if i not in used_l and j not in used_r and _same_way(left[i], right[j]) and _calls_agree(left[i], right[j]):
            pairs.append((left[i], right[j]))
            used_l.add(i)
            used_r.add(j)
    return used_l, used_r


def same_words(left: list[KernelUse], right: list[KernelUse]) -> list[tuple[float, int, int]]:
    """The (1.0, i, j) of `left[i]` and `right[j]` whose names have the same words, in memory linear in the kernels:
    every such pair where a word set's two sides make at most ALL_PAIRS pairs (the closest calls and time then pick
    among them), else, for a word set shared by thousands (a recompiled model's `triton_poi_fused_add_mul_<n>`),
    its kernels paired in the order of their time and calls on each side."""
    sides: dict[frozenset[str], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for side, uses in enumerate((left, right)):
        for k, u in enumerate(uses):
            if found := words(_short(u.op)):
                sides[found][side].append(k)
    same = []
    for mine, theirs in sides.values():
        if len(mine) * len(theirs) <= ALL_PAIRS:
            same += [(1.0, i, j) for i in mine for j in theirs]
        else:
            mine.sort(key=lambda i: (left[i].us, left[i].calls))
            theirs.sort(key=lambda j: (right[j].us, right[j].calls))
            same += [(1.0, i, j) for i, j in zip(mine, theirs, strict=False)]
    return same


def match_kernels(
    a: dict[tuple[str, str], KernelUse], b: dict[tuple[str, str], KernelUse]
) -> list[tuple[KernelUse | None, KernelUse | None]]:
    """Pairs (A's use, B's use) of the same kernel; (x, None) is removed, (None, y) added.

    The exact name first; then, within a family, the same short name, the instantiations of one template chosen
    among by their calls and time (the pairs of least total difference); then a close name: more than CLOSE_NAME
    (half) of the words that say what they compute in common (see `words`), the closest pair first, the nearer
    calls and time among equals; in a family of one job (ONE_JOB: gemm, attention, softmax), one kernel left on
    each side pairs too (the same job, another build or GPU). Two kernels of other short names pair only where
    their calls per step agree within SAME_CALLS (_calls_agree). The rest are removed or added. A copy pairs only
    with a copy the same way (never DtoH with DtoD), a backward kernel only with a backward one. Linear in the
    kernels but for the pairs of close names (close_pairs); linear in memory for the same words (same_words)."""
    pairs: list[tuple[KernelUse | None, KernelUse | None]] = [(a[k], b[k]) for k in a if k in b]
    by_family: dict[str, tuple[list[KernelUse], list[KernelUse]]] = defaultdict(lambda: ([], []))
    for side, mine, theirs in ((0, a, b), (1, b, a)):
        for k, u in mine.items():
            if k not in theirs:
                by_family[u.op.family][side].append(u)
    for family in sorted(by_family):
        left, right = by_family[family]
        right_named: dict[str, list[KernelUse]] = defaultdict(list)
        for v in right:
            right_named[_short(v.op)].append(v)
        left_named: dict[str, list[KernelUse]] = defaultdict(list)
        for u in left:
            left_named[_short(u.op)].append(u)
        used: set[int] = set()  # id() of the uses paired here
        for name, mine in left_named.items():
            theirs = [v for v in right_named.get(name, ()) if _may_pair(mine[0], v)]
            if not theirs:
                continue
            for i, j in _assign(mine, theirs):
                pairs.append((mine[i], theirs[j]))
                used.update((id(mine[i]), id(theirs[j])))
        left = [u for u in left if id(u) not in used]
        right = [v for v in right if id(v) not in used]
        # The closest pairs first: those of the same words (a recompiled model's renumbered kernels), found by
        # their words alone; then the rest, among the kernels left, as they rank among every pair.
        same = same_words(left, right)
        for _ in range(2):
            used_l, used_r = _pair_closest(same, left, right, pairs)
            left = [u for i, u in enumerate(left) if i not in used_l]
            right = [v for j, v in enumerate(right) if j not in used_r]
            same = close_pairs([words(_short(u.op)) for u in left], [words(_short(v.op)) for v in right])
        lone = len(left) == 1 and len(right) == 1 and family in ONE_JOB
        if lone and _same_way(left[0], right[0]) and _calls_agree(left[0], right[0]):
            pairs.append((left[0], right[0]))
        else:
            pairs += [(u, None) for u in left] + [(None, v) for v in right]
    return pairs


CPU_ROWS = 15  # rows of the CPU ops' self-time table of a diff of two CPU traces; the rest counted under it
SAME_TIME = 0.05  # an op whose calls match and whose self time moved less than this share is unchanged

OF_DELTA = "(of |Δ|: each row's share of the gross change, the sum of every row's |Δ|; Δ's sign says which way)"


def pairing_lines(renamed: list[tuple[KernelUse, KernelUse]], markdown: bool = False) -> list[str]:
    """The pairs of kernels of other names, each in full (up to TEXT_WIDTH in text), with why they pair: the share
    of their words in common, or their family's lone kernel on each side."""
    lead = (f"Paired by name (more than {CLOSE_NAME:.0%} of the words that say what they compute in common, or the "
            f"one kernel left on each side in a family of one job: {', '.join(ONE_JOB)}):")  # fmt: skip
    out = [lead] if markdown else textwrap.wrap(lead, TEXT_WIDTH)
    for u, v in renamed:
        score = similarity(words(_short(u.op)), words(_short(v.op)))
        why = (
            f"{score:.0%} of words in common" if score > CLOSE_NAME else f"the one {u.op.family} kernel left each side"
        )
        x, y = printable(_short(u.op), newlines=False), printable(_short(v.op), newlines=False)
        if markdown:
            out.append(f"- `{x}` → `{y}` ({why})")
        else:
            out += [f"  A: {cut_name(x, TEXT_WIDTH - 5)}", f"  B: {cut_name(y, TEXT_WIDTH - 8 - len(why))} ({why})"]
    return out


def _signed(value: float, digits: int = 3) -> str:
    text = num(abs(value), digits)
    return ("−" if value < 0 else "+") + text if value else "0"


def _signed_time(us: float) -> str:
    """A change of time with its sign: '+1.2 ms', '−3.40 µs', '0'."""
    return ("−" if us < 0 else "+") + human_time(abs(us)) if us else "0"


def _listed(uses: list[KernelUse], kept: set[str], limit: int = 2) -> str:
    """'Memcpy DtoD (128 µs)', the largest first, with a count of the rest; a kernel whose short name is in `kept`
    (the other trace runs another instantiation of its template) is 'one instantiation of ...', never gone or new."""

    def named(u: KernelUse) -> str:
        again = u.op.category == "kernel" and _short(u.op) in kept
        return ("one instantiation of " if again else "") + short_name(u.op.name, 70)

    shown = ", ".join(f"{named(u)} ({human_time(u.us)})" for u in uses[:limit])
    return shown + (f" and {len(uses) - limit} more" if len(uses) > limit else "")


def _ops(names: list[str], ops: dict[str, float], limit: int = 3) -> str:
    """The ops a reader looks for first (aten::), the most called first."""
    ranked = sorted(names, key=lambda n: (not n.startswith("aten::"), -ops[n], n))
    shown = ", ".join(printable(n, newlines=False) for n in ranked[:limit])
    return shown + (" and more" if len(ranked) > limit else "")


def headline(pairs, ta: Row, tb: Row, ops_a: dict, ops_b: dict) -> str:
    """One sentence: what GPU work went or came (the largest first), the GPU time that makes, the kernel count,
    and the CPU ops that went or came."""
    in_a = {_short(u.op) for u, _ in pairs if u}
    in_b = {_short(v.op) for _, v in pairs if v}
    removed = sorted((u for u, v in pairs if v is None), key=lambda u: -u.us)
    added = sorted((v for u, v in pairs if u is None), key=lambda v: -v.us)
    parts = []
    swapped = [(u, v) for u, v in pairs if u and v and _short(u.op) != _short(v.op)]
    if swapped:
        u, v = max(swapped, key=lambda p: abs(p[1].us - p[0].us))
        if abs(v.us - u.us) >= max([w.us for w in removed + added], default=0.0):
            parts.append(
                f"{short_name(u.op.name, 50)} → {short_name(v.op.name, 70)} ({human_time(u.us)} → {human_time(v.us)})"
            )
    if removed:
        parts.append(f"gone: {_listed(removed, in_b)}")
    if added:
        parts.append(f"new: {_listed(added, in_a)}")
    if not parts:
        changed = sorted(((u, v) for u, v in pairs if u and v), key=lambda p: -abs(p[1].us - p[0].us))
        if changed:
            u, v = changed[0]
            parts.append(f"the same GPU work; {short_name(u.op.name, 40)} {_signed_time(v.us - u.us)} per step")
    if ta.kernels is not None and tb.kernels is not None and ta.kernels != tb.kernels:
        parts.append(f"{num(ta.kernels)} kernels per step → {num(tb.kernels)}")
    if ta.gpu_us and tb.gpu_us is not None:
        pct = _signed(100 * (tb.gpu_us / ta.gpu_us - 1), 2)
        parts.append(f"GPU busy {human_time(ta.gpu_us)} → {human_time(tb.gpu_us)} per step ({pct}%)")
    elif ta.cpu_us and tb.cpu_us is not None:
        parts.append(f"CPU {human_time(ta.cpu_us)} → {human_time(tb.cpu_us)} per step")
    gone = [n for n in ops_a if ops_a[n] and not ops_b.get(n)]
    new = [n for n in ops_b if ops_b[n] and not ops_a.get(n)]
    if gone:
        parts.append(f"{_ops(gone, ops_a)} gone from the CPU side")
    if new:
        parts.append(f"{_ops(new, ops_b)} new on the CPU side")
    sentence = "; ".join(parts)
    if not parts:
        return "No difference in GPU work, CPU ops or time."
    return (sentence[0].upper() + sentence[1:] if sentence.startswith(("gone", "new", "the")) else sentence) + "."


def _gflop(flops: float) -> str:
    """FLOPs as GFLOP to 4 digits; DASH for an integer past a float's range (a trace's metadata is untrusted)."""
    try:
        return f"{flops / 1e9:.4g}"
    except OverflowError:
        return DASH


def comparability(a: Trace, b: Trace) -> list[str]:
    """Notes on what differs beyond the variant: the script, the work (FLOPs), the GPU."""
    notes = []
    sa, sb = a.meta.get("script"), b.meta.get("script")
    if sa and sb and sa != sb:
        notes.append(f"different scripts ({sa} vs {sb})")
    fa, fb = a.meta.get("flops"), b.meta.get("flops")
    if isinstance(fa, (int, float)) and isinstance(fb, (int, float)) and fa != fb:
        notes.append(f"different work ({_gflop(fa)} vs {_gflop(fb)} GFLOP per step: other shapes)")
    if a.device_name != b.device_name:
        notes.append(f"different devices ({a.device_name} vs {b.device_name}): kernels matched by family and name")
    return notes


def phase_diff(a: Trace, b: Trace, markdown: bool = False) -> str:
    """A row per phase of A or B: CPU time, GPU busy time and launches (kernel + graph) per step, A then B; the
    dash where a trace has no such phase, no GPU lane (a CPU trace) or, for GPU busy, no GPU activity."""
    cells = []
    for name in dict.fromkeys([*a.phases, *b.phases]):

        def median(trace: Trace, value, needs, name=name) -> float | None:
            return trace.per_step(lambda s: value(s.phase(name))) if name in trace.phases and needs(trace) else None

        row = [name]
        for value, needs, shown in (
            (lambda p: p.cpu_us, lambda t: True, human_time),
            (lambda p: p.gpu_busy_us, lambda t: t.has_gpu and t.gpu_activity, human_time),
            (lambda p: p.launches, lambda t: t.has_gpu, num),
        ):
            row += [shown(median(a, value, needs)), shown(median(b, value, needs))]
        cells.append(row)
    headers = ["phase", "A CPU", "B CPU", "A GPU busy", "B GPU busy", "A launches", "B launches"]
    return table(headers, cells, {"phase"}, markdown)


def cpu_self_times(trace: Trace) -> dict[str, list[float]]:
    """Op name -> its self time in each profiled step, µs (the call tree's: its span less the ops it called, on its
    thread; 0 in a step without it), with no second read of the file."""
    per_step = [trace.tree.self_us(s.start_us, s.start_us + s.dur_us) for s in trace.steps]
    return {n: [own.get(n, 0.0) for own in per_step] for n in {n for own in per_step for n in own}}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def cpu_op_rows(times_a: dict, times_b: dict, calls_a: dict, calls_b: dict) -> tuple[list[list[str]], int]:
    """The rows of the CPU ops whose calls or self time per step (the mean over the steps) changed, by the size of
    the change, CPU_ROWS at most, with each row's share of the gross change; and how many more changed."""
    changes = []
    for name in set(times_a) | set(times_b):
        x, y = _mean(times_a.get(name, [])), _mean(times_b.get(name, []))
        ca, cb = calls_a.get(name, 0), calls_b.get(name, 0)
        if ca == cb and abs(y - x) < SAME_TIME * max(x, 0.1):
            continue
        what = "removed" if not cb else "added" if not ca else "changed"
        changes.append((what, name, ca, cb, x, y))
    gross = sum(abs(y - x) for *_, x, y in changes) or 1.0
    changes.sort(key=lambda c: (-abs(c[5] - c[4]), c[1]))
    rows = [[what, num(ca), num(cb), human_time(x), human_time(y), _signed_time(y - x),
             f"{100 * abs(y - x) / gross:.0f}%", printable(name, newlines=False)]
            for what, name, ca, cb, x, y in changes[:CPU_ROWS]]  # fmt: skip
    return rows, max(0, len(changes) - CPU_ROWS)


def speed_line(a: Trace, b: Trace, times_a: dict, times_b: dict, calls_a: dict, calls_b: dict) -> str | None:
    """One line where the ops common to both traces (the same name and calls per step) took, summed, a time per step
    that moved between A and B by more than it spreads across the steps of either: the machine ran them at another
    speed (load, clocks, threads), so the change is not what made the whole difference. None where they did not
    move so, where either trace has fewer than 2 steps (no spread), or the traces do other work or dtypes."""
    if len(a.steps) < 2 or len(b.steps) < 2:
        return None
    for key in ("flops", "dtype"):
        if a.meta.get(key) != b.meta.get(key):
            return None
    common = [n for n in times_a if n in times_b and calls_a.get(n) and calls_a.get(n) == calls_b.get(n)]
    if not common:
        return None
    per_a = [sum(times_a[n][i] for n in common) for i in range(len(a.steps))]
    per_b = [sum(times_b[n][i] for n in common) for i in range(len(b.steps))]
    mid_a, mid_b = median_of(per_a), median_of(per_b)
    spread = max(max(per_a) - min(per_a), max(per_b) - min(per_b))
    if mid_a <= 0 or abs(mid_b - mid_a) <= spread:
        return None
    ops = "the op" if len(common) == 1 else f"the {len(common)} ops"
    pct = _signed(100 * (mid_b / mid_a - 1), 2)
    return (f"speed: {ops} in both took {human_time(mid_a)} → {human_time(mid_b)} a step ({pct}%), over their "
            f"{human_time(spread)} spread across steps: speeds differ")  # fmt: skip


def render(a: Trace, b: Trace, markdown: bool = False) -> str:
    """The whole diff, as text or Markdown."""
    heading = (lambda s: f"### {s}") if markdown else (lambda s: s)  # noqa: E731
    gap = [""] if markdown else []
    title = f"diff: A = {a.name} → B = {b.name}"
    out = [heading(title)] if markdown or len(title) <= TEXT_WIDTH else [f"diff: A = {a.name}", f"    → B = {b.name}"]
    if a.path.resolve() == b.path.resolve():
        return "\n".join([*out, "", "No difference: A and B are the same trace file."])
    da, db = diagnose(a), diagnose(b)
    bound = bound_lines(da, db)  # what the diff leads with: the bound before and after
    out += [
        *gap,
        *(
            bound
            if markdown
            else [w for line in bound for w in textwrap.wrap(line, TEXT_WIDTH, subsequent_indent="   ")]
        ),
    ]
    notes = comparability(a, b)
    cpu = f"CPU = {a.cpu_what}" if a.cpu_what == b.cpu_what else f"CPU = A: {a.cpu_what}; B: {b.cpu_what}"
    lines = [cpu, *(f"note: {n}; compared anyway" for n in notes)]
    for side, trace, d in (("A", a, da), ("B", b, db)):  # a broken invariant of a verdict: one note of its own
        lines += [f"note: {side}: {note}" for note in (*trace.notes, *invariant_notes(trace, d))]
    out += ["", *(printable(line, newlines=False) for line in lines)]  # a device's or label's name: one line
    ta, tb = summarize(a), summarize(b)
    ops_a, ops_b = a.median_counts(lambda s: s.cpu_ops), b.median_counts(lambda s: s.cpu_ops)
    pairs = match_kernels(a.kernel_uses(), b.kernel_uses())
    line = headline(pairs, ta, tb, ops_a, ops_b)
    out += ["", *([line] if markdown else textwrap.wrap(line, TEXT_WIDTH, break_on_hyphens=False))]
    on_cpu = not (a.has_gpu and a.gpu_activity) and not (b.has_gpu and b.gpu_activity)  # two CPU traces
    times_a, times_b = (cpu_self_times(a), cpu_self_times(b)) if on_cpu else ({}, {})
    speed = speed_line(a, b, times_a, times_b, ops_a, ops_b) if on_cpu else None
    if speed:
        out += [speed] if markdown else textwrap.wrap(speed, TEXT_WIDTH, subsequent_indent="  ")

    rows = []
    for label, x, y, digits in (
        ("GPU busy", ta.gpu_us, tb.gpu_us, 0), ("CPU", ta.cpu_us, tb.cpu_us, 0),
        ("kernels", ta.kernels, tb.kernels, 3), ("launches", ta.launches, tb.launches, 3),
        *([("graph launches", ta.graph_launches, tb.graph_launches, 3)] if ta.graph_launches or tb.graph_launches
          else []),
        ("memcpy", ta.calls["memcpy"], tb.calls["memcpy"], 3), ("memset", ta.calls["memset"], tb.calls["memset"], 3),
        ("TFLOP/s", ta.tflops, tb.tflops, 3), ("peak MB", ta.peak_mb, tb.peak_mb, 4),
    ):  # fmt: skip
        if x is None and y is None:
            continue
        shown, signed = (human_time, _signed_time) if digits == 0 else (lambda v, d=digits: num(v, d), _signed)
        delta = signed(y - x) if x is not None and y is not None else DASH
        pct = _signed(100 * (y / x - 1), 2) + "%" if x and y is not None else DASH
        rows.append([label, shown(x), shown(y), delta, pct])
    out += ["", heading("Totals per step (medians)"), *gap, table(["", "A", "B", "Δ", "Δ%"], rows, {""}, markdown)]
    out += [f"{side}: per step, {line}" for side, row in (("A", ta), ("B", tb)) if (line := launch_line(row))]
    if a.phases or b.phases:
        out += ["", heading("Phases per step (medians)"), *gap, phase_diff(a, b, markdown)]

    gross = sum(abs((v.us if v else 0.0) - (u.us if u else 0.0)) for u, v in pairs) or 1.0

    def delta_us(pair) -> float:
        u, v = pair
        return (v.us if v else 0.0) - (u.us if u else 0.0)

    kernel_rows, renamed = [], []  # renamed: the pairs of other short names, as their rows show them
    for u, v in sorted(pairs, key=lambda p: -abs(delta_us(p))):
        if u and v and u.calls == v.calls and abs(v.us - u.us) < 0.05 * max(u.us, 0.1) and _short(u.op) == _short(v.op):
            continue  # unchanged
        what = "removed" if v is None else "added" if u is None else "changed"
        d = delta_us((u, v))
        if u and v and _short(u.op) != _short(v.op):
            name = f"{_short(u.op)} → {_short(v.op)}"
            renamed.append((u, v))
        else:
            name = short_name(_short((v or u).op), 90) if u is None or v is None else _short(u.op)
        kernel_rows.append([
            what, (u or v).op.family, num(u.calls) if u else "0", num(v.calls) if v else "0",
            human_time(u.us) if u else "0", human_time(v.us) if v else "0", _signed_time(d),
            f"{100 * abs(d) / gross:.0f}%", name,
        ])  # fmt: skip
    if kernel_rows:
        headers = ["", "family", "A calls", "B calls", "A", "B", "Δ", "of |Δ|", "kernel"]
        if not markdown:  # the kernel names take what is left of TEXT_WIDTH; a pair's two names half each
            shown_pairs = {printable(f"{_short(u.op)} → {_short(v.op)}", newlines=False): (u, v) for u, v in renamed}

            def cut(text: str, room: int) -> str:
                if text not in shown_pairs:
                    return cut_name(text, room)
                u, v = shown_pairs[text]
                half = max((room - 3) // 2, 10)
                return f"{cut_name(printable(_short(u.op), newlines=False), half)} → " + cut_name(
                    printable(_short(v.op), newlines=False), room - 3 - half
                )

            kernel_rows = fit_last_column(headers, kernel_rows, cut)
        out += ["", heading("GPU work added, removed or changed (per step, by impact)"), *gap]
        out.append(table(headers, kernel_rows, {"", "family", "kernel"}, markdown))
        out.append(OF_DELTA)
        if renamed:
            out += ["", *pairing_lines(renamed, markdown)]
    elif (a.has_gpu and a.gpu_activity) or (b.has_gpu and b.gpu_activity):
        out += ["", "GPU work: the same kernels, within 5% of their time."]

    if times_a or times_b:
        cpu_rows, more = cpu_op_rows(times_a, times_b, ops_a, ops_b)
        if cpu_rows:
            headers = ["", "A calls", "B calls", "A self", "B self", "Δ", "of |Δ|", "op"]
            if not markdown:
                cpu_rows = fit_last_column(headers, cpu_rows)
            out += ["", heading("CPU ops' self time per step (by impact)"), *gap]
            out.append(table(headers, cpu_rows, {"", "op"}, markdown))
            out += [OF_DELTA, *([f"({more} more op{'s' * (more > 1)} changed, by less)"] if more else [])]
        else:
            out += ["", "CPU ops: the same calls, within 5% of their self time."]

    op_rows = [[("removed" if not ops_b.get(n) else "added" if not ops_a.get(n) else "changed"), n,
                num(ops_a.get(n, 0)), num(ops_b.get(n, 0))]
               for n in sorted(set(ops_a) | set(ops_b)) if ops_a.get(n, 0) != ops_b.get(n, 0)]  # fmt: skip
    if op_rows:
        op_rows.sort(key=lambda r: ({"removed": 0, "added": 1, "changed": 2}[r[0]], r[1]))
        out += ["", heading("CPU ops whose calls per step changed"), *gap]
        out.append(table(["", "op", "A calls", "B calls"], op_rows, {"", "op"}, markdown))

    calls_a, calls_b = a.typical_calls, b.typical_calls
    call_rows = [[n, num(calls_a.get(n, 0)), num(calls_b.get(n, 0)), _signed(calls_b.get(n, 0) - calls_a.get(n, 0))]
                 for n in sorted(set(calls_a) | set(calls_b)) if calls_a.get(n, 0) != calls_b.get(n, 0)]  # fmt: skip
    if call_rows:
        out += ["", heading("Runtime and driver calls whose count per step changed"), *gap]
        out.append(table(["call", "A", "B", "Δ"], call_rows, {"call"}, markdown))
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = OneLineParser(__doc__, prog="python -m common.diff")
    parser.add_argument("a", type=Path, metavar="A", help="the trace to compare from (.json or .json.gz)")
    parser.add_argument("b", type=Path, metavar="B", help="the trace to compare to")
    parser.add_argument("--markdown", action="store_true", help="Markdown instead of plain text (default: off)")
    parser.add_argument("--region", metavar="NAME", help=REGION_HELP)
    return parser.parse_args(argv)


@cli
def main(argv: list[str] | None = None) -> int:
    """Print the diff of two traces; 0 on success, 2 on bad input."""
    args = parse_args(argv)
    interrupts.install()  # a signal: one `interrupted` line and its exit code, a second one at once
    for path in (args.a, args.b):
        why = not_a_file(path, missing="no such trace file")
        if why:
            raise SuiteError(f"{path}: {why}")
    try:
        a, b = read_trace(args.a, args.region), read_trace(args.b, args.region)
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    print(printable(render(a, b, args.markdown)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
