"""Compare the suite's per-op FLOPs and bytes with AMD's TraceLens, op by op, on the repository's trace fixtures.

Setup (once; TraceLens is the GitHub repository AMD-AGI/TraceLens, not the unrelated `TraceLens` package on PyPI):
    git clone https://github.com/AMD-AGI/TraceLens /tmp/TraceLens-src
    git -C /tmp/TraceLens-src checkout 171dd74721ca1ec45709e5805b68ae1f65e27811
    uv venv /tmp/tracelens-venv --python 3.11 && uv pip install --python /tmp/tracelens-venv /tmp/TraceLens-src
  Its dependencies (pandas, openpyxl, xprof, ...) come from PyPI. From a bare mirror of the repository instead of a
  clone, export the tree less its test data (two folders whose largest files a mirror may lack; the install does not
  use them), as one line:
    mkdir -p /tmp/TraceLens-src && git --git-dir=MIRROR archive 171dd74721ca1ec45709e5805b68ae1f65e27811 -- .
        ':(exclude)agent_evals' ':(exclude)tests' | tar -x -C /tmp/TraceLens-src
Usage (the orchestrator is stdlib only; run it with any python3 from the repository root):
    python3 benchmarks/tracelens_compare.py [TRACE ...] [--ops] [--timeout 1200] [--tracelens-python PY]
  No TRACE: every *.json.gz and *.json under tests/fixtures/; a file that is not a Chrome trace is skipped.

Two workers, one subprocess each for all the traces, print a JSON line per trace:
  tracelens  TRACELENS_PYTHON (--tracelens-python, default /tmp/tracelens-venv/bin/python) runs this file's TraceLens
             worker: TreePerfAnalyzer.from_file(TRACE).build_df_unified_perf_table(), as TraceLens's own
             generate_perf_report_pytorch does; of each row with a perf model, its `GFLOPS` and `Data Moved (MB)` (MiB,
             bytes / 2**20), its External id and the External ids its kernels carry.
  suite      `uv run python` (--suite-python) runs this file's suite worker in the repository:
             common.reader.build.read_trace(TRACE), then each op of `Trace.shapes` whose External id a GPU op of the
             profiled steps carries (the op that launched it, as common.analysis.roofline_table.op_roofs finds them),
             with common.reader.roofline.op_work's (FLOPs, bytes).
Matching is by identity: a TraceLens row holds the suite's ops whose External id is the row's own or one its kernels
carry. TraceLens reports the outermost op it has a model for (aten::layer_norm, aten::convolution with its bias add_,
a backward under its autograd node), the suite the op that launched each kernel (aten::native_layer_norm); where a row
holds several of the suite's ops, their figures are summed. Each op lands in one bin: exact (the same FLOPs, and the
same bytes where both tools give bytes, to 1e-9 relative: TraceLens reports GFLOPS and MiB, multiplied back here),
within 1%, differs, or one side (one tool has a figure, the other none). Per trace and in total: a table of the bins by
category (TraceLens's category names), then each group of ops that differ, are within 1% or sit on one side, with why.
--ops also prints every op that differs: its name, shapes, both figures and their ratio.

The conventions that differ, read from both formulas (TraceLens at the commit above; CONVENTIONS holds them, the
output's notes print them with how many ops each explains):
  addmm FLOPs     TraceLens adds the bias, 2·M·N·K + M·N; the suite counts the product, 2·M·N·K (FlopCounterMode's).
  addmm bias      TraceLens counts the bias as N elements whatever its shape; the suite reads it as its dims say.
  attention       TraceLens counts its bytes at 2 an element whatever the dtype, the suite at the dtype's size. A
                  cuDNN or memory-efficient backward: TraceLens four products (2x the forward), a flash one five; the
                  suite five (2.5x, QK^T recomputed) for every backend. Backward bytes: TraceLens reads q, k, v, dO and
                  writes dq, dk, dv; the suite also reads the output, the logsumexp and the RNG seed and offset the op
                  takes. TraceLens reaches a backward only through the autograd node linked to its forward: there is
                  none in a compiled graph (CompiledFunctionBackward), so it has no figure there.
  convolution     TraceLens parses a bias only where aten::convolution has three inputs (it has nine), so its row,
                  which holds the bias add_ kernel, counts no bias; the suite counts that add_ as its own op. Backward:
                  TraceLens reads the output gradient once per gradient (twice) and counts no bias gradient; the suite
                  reads it once and counts the bias gradient's aten::sum, inside TraceLens's row: the two nearly cancel.
  norms           TraceLens: layer norm 5 FLOPs an element + 6 per normalized feature, its backward 9 an element; RMS
                  norm 4 an element + 2 a row, its backward 10 an element. The suite: 7, 14, 4 and 8 an element.
  copy_           TraceLens models it as unary elementwise, 1 FLOP an element; the suite counts none.
  reductions      TraceLens parses the dims from `Concrete Inputs` as Python values, which the trace writes as text
                  ("[-1]"), so every reduction writes one element; the suite writes the reduced shape. Without
                  record_shapes TraceLens gives a reduction 0 FLOPs (and no bytes); the suite gives no figure.
  a Scalar        TraceLens models the outer aten::mul or aten::div(Tensor, Scalar), the Scalar one 4-byte element;
                  the suite the inner op that launched the kernel, whose scalar is a 0-dim double or int64 (8 bytes).
  _scaled_mm      the suite reads the two fp32 scales (8 bytes); TraceLens does not.
  one side        TraceLens models Inductor's Triton kernels (from their metadata in the trace), the suite aten ops
                  only; TraceLens has no model for gelu, softmax, where, fill_, gather, embedding_dense_backward,
                  _grouped_mm or a bare aten::_flash_attention_forward; in a trace without a launch call TraceLens links
                  GPU work by External id, which the flow events do not carry, and finds none under a memcpy's copy_.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures"
TRACELENS_COMMIT = "171dd74721ca1ec45709e5805b68ae1f65e27811"  # the commit measured and whose formulas were read
TOLERANCE = 0.01  # "within 1%"
EXACT = 1e-9  # "exact": equal but for float rounding (TraceLens's GFLOPS and MiB multiplied back)


@dataclass(frozen=True)
class Op:
    """One op as one tool models it: its External id, name, FLOPs and bytes (None: no figure), category and inputs'
    dims and types; for TraceLens, the External ids its kernels carry (the suite's ops its row holds)."""

    ext: str
    name: str
    flops: float | None
    bytes: float | None
    category: str
    dims: list = field(default_factory=list)
    types: list = field(default_factory=list)
    covers: tuple[str, ...] = ()


@dataclass
class Pair:
    """One op either tool models: the suite's op(s) inside one TraceLens row, or one side alone."""

    suite: list[Op]
    tracelens: Op | None

    @property
    def category(self) -> str:
        return self.suite[0].category if self.suite else self.tracelens.category  # type: ignore[union-attr]

    @property
    def name(self) -> str:
        return "+".join(sorted({op.name for op in self.suite})) if self.suite else self.tracelens.name  # type: ignore

    def figure(self, what: str) -> float | None:
        """The suite's FLOPs ("flops") or bytes ("bytes") of its op(s) here: their sum; None where one has none."""
        values = [getattr(op, what) for op in self.suite]
        return None if not values or None in values else sum(values)


def relative(a: float, b: float) -> float:
    """|a - b| over the larger of the two; 0 where both are 0."""
    top = max(abs(a), abs(b))
    return abs(a - b) / top if top else 0.0


def match(suite: list[Op], tracelens: list[Op]) -> list[Pair]:
    """Pair each TraceLens row that has FLOPs with the suite's ops it holds (its own External id or its kernels'),
    those the suite has FLOPs for; what is left of either side is a Pair of one side alone."""
    by_ext = {op.ext: op for op in suite if op.flops is not None}
    pairs, used = [], set()
    for row in (r for r in tracelens if r.flops is not None):
        held = [by_ext[e] for e in dict.fromkeys((row.ext, *row.covers)) if e in by_ext and e not in used]
        used.update(op.ext for op in held)
        pairs.append(Pair(held, row))
    return pairs + [Pair([op], None) for op in suite if op.flops is not None and op.ext not in used]


def differences(pair: Pair) -> dict[str, float]:
    """The FLOPs' and (where both tools give them) the bytes' relative difference; none for one side alone."""
    found: dict[str, float] = {}
    if pair.tracelens is None or not pair.suite:
        return found
    for what in ("flops", "bytes"):
        ours, theirs = pair.figure(what), getattr(pair.tracelens, what)
        if ours is not None and theirs is not None:
            found[what] = relative(ours, theirs)
    return found


def bin_of(pair: Pair) -> str:
    """Its bin: "exact", "within 1%", "differs", "suite only" or "TraceLens only"."""
    if pair.tracelens is None:
        return "suite only"
    if not pair.suite:
        return "TraceLens only"
    worst = max(differences(pair).values())
    return "exact" if worst <= EXACT else "within 1%" if worst <= TOLERANCE else "differs"


def what_differs(pair: Pair) -> str:
    """ "FLOPs", "bytes" or "FLOPs, bytes": the figures beyond 1% apart where the pair differs, else beyond exact."""
    names, limit = {"flops": "FLOPs", "bytes": "bytes"}, TOLERANCE if bin_of(pair) == "differs" else EXACT
    return ", ".join(names[k] for k, v in differences(pair).items() if v > limit)


def bin_counts(pairs: list[Pair]) -> dict[str, Counter]:
    """Category -> a Counter of bins."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for pair in pairs:
        counts[pair.category][bin_of(pair)] += 1
    return counts


# --- why two figures differ ----------------------------------------------------------------------------------------


def _bias_not_a_row(op: Op) -> bool:
    """An addmm or baddbmm whose bias is not the N elements TraceLens assumes."""
    dims = op.dims if isinstance(op.dims, list) else []
    if op.name not in ("aten::addmm", "aten::baddbmm") or len(dims) < 3 or not dims[2]:
        return False
    return dims[0] != [dims[2][-1]]


def _two_bytes(ops: list[Op]) -> bool:
    """Whether each op's first input is a 16-bit float, the 2 bytes an element TraceLens's attention assumes."""
    return all(isinstance(op.types, list) and op.types[:1] in (["c10::BFloat16"], ["c10::Half"]) for op in ops)


def explains(pair: Pair, b: str, what: str) -> list[str]:
    """The keys of CONVENTIONS that explain why `pair`, in bin `b`, is not exact (`what`: the figures that differ)."""
    names = {op.name for op in pair.suite}
    if b == "TraceLens only":
        if pair.category == "triton":
            return ["Triton kernels"]
        return ["reduction without shapes"] if pair.category == "reduce" and not pair.tracelens.dims else []
    if b == "suite only":
        if pair.category == "SDPA_bwd":
            return ["attention bwd link"]
        return ["no link"] if names == {"aten::copy_"} else ["no TraceLens model"]
    flops, moved = "FLOPs" in what, "bytes" in what
    found = [
        ("addmm FLOPs", flops and bool(names & {"aten::addmm", "aten::baddbmm"})),
        ("addmm bias", moved and any(_bias_not_a_row(op) for op in pair.suite)),
        ("attention bwd FLOPs", flops and pair.category == "SDPA_bwd"),
        ("attention bwd bytes", moved and pair.category == "SDPA_bwd"),
        ("attention dtype", moved and pair.category.startswith("SDPA") and not _two_bytes(pair.suite)),
        ("convolution bias", pair.category == "CONV_fwd" and "aten::add_" in names),
        ("convolution bwd", moved and pair.category == "CONV_bwd"),
        ("layer norm", flops and bool(names & {"aten::native_layer_norm", "aten::layer_norm"})),
        ("layer norm bwd", flops and "aten::native_layer_norm_backward" in names),
        ("RMS norm", flops and bool(names & {"aten::_fused_rms_norm", "aten::rms_norm"})),
        ("RMS norm bwd", flops and "aten::_fused_rms_norm_backward" in names),
        ("copy_ FLOPs", flops and names == {"aten::copy_"}),
        ("reduction output", moved and pair.category == "reduce"),
        (
            "a Scalar",
            moved and pair.category == "elementwise" and pair.tracelens.ext not in {o.ext for o in pair.suite},
        ),
        ("_scaled_mm scales", moved and "aten::_scaled_mm" in names),
    ]
    return [key for key, holds in found if holds]


CONVENTIONS = {
    "addmm FLOPs": "TraceLens adds the bias to addmm's FLOPs, 2·M·N·K + M·N; the suite counts the product, 2·M·N·K "
    "(as torch's FlopCounterMode does).",
    "addmm bias": "TraceLens counts addmm's bias as N elements whatever its shape; this bias is M×N, which the suite "
    "reads whole.",
    "attention bwd FLOPs": "TraceLens counts a cuDNN or memory-efficient attention backward as four products (2× the "
    "forward) and a flash one as five; the suite counts five (2.5×, QKᵀ recomputed) for every backend.",
    "attention bwd bytes": "TraceLens's attention backward reads q, k, v and dO and writes dq, dk, dv, at 2 bytes an "
    "element; the suite also reads the output, the logsumexp and the RNG seed and offset the backward op takes.",
    "attention dtype": "TraceLens counts attention's bytes at 2 an element whatever the dtype; the suite at the "
    "dtype's size.",
    "attention bwd link": "TraceLens has no model of its own for an attention backward op: it reaches the forward's "
    "through the autograd node linked to the forward op, and a compiled graph's backward runs under "
    "CompiledFunctionBackward, with no such link.",
    "convolution bias": "TraceLens's aten::convolution row holds the bias add_ kernel too, but it parses a bias only "
    "where the op has three inputs (aten::convolution has nine), so it counts no bias; the suite counts that add_ "
    "as its own op (the output read and written again).",
    "convolution bwd": "TraceLens reads the output gradient once for each gradient (twice) and counts no bias "
    "gradient; the suite reads it once, and counts the bias gradient's aten::sum, whose kernel is in TraceLens's "
    "row: the two nearly cancel.",
    "layer norm": "TraceLens's layer norm: 5 FLOPs an element plus 6 per normalized feature; the suite's: 7 an "
    "element.",
    "layer norm bwd": "TraceLens's layer norm backward: 9 FLOPs an element (4 for the dot product, 5 for the input's "
    "gradient); the suite's: 14 (twice the forward's 7).",
    "RMS norm": "TraceLens's RMS norm: 4 FLOPs an element plus 2 a row (the rsqrt); the suite's: 4 an element.",
    "RMS norm bwd": "TraceLens's RMS norm backward: 10 FLOPs an element; the suite's: 8 (twice the forward's 4).",
    "copy_ FLOPs": "TraceLens models copy_ as a unary elementwise op, 1 FLOP an element; the suite counts none.",
    "reduction output": "TraceLens parses the reduced dims from Concrete Inputs as Python values, which the trace "
    'writes as text ("[-1]"), so every reduction writes one element; the suite writes the reduced shape.',
    "reduction without shapes": "The trace has no record_shapes: TraceLens gives a reduction without Input Dims 0 "
    "FLOPs (and no bytes); the suite gives no figure without shapes.",
    "a Scalar": "TraceLens models the outer op, aten::mul or aten::div(Tensor, Scalar), its Scalar one 4-byte "
    "element; the suite the inner op that launched the kernel, whose scalar is a 0-dim double or int64 tensor (8 "
    "bytes).",
    "_scaled_mm scales": "The suite reads _scaled_mm's two fp32 scales (8 bytes); TraceLens does not.",
    "Triton kernels": "TraceLens models Inductor's generated Triton kernels from their metadata in the trace's args; "
    "the suite's model covers aten ops only.",
    "no link": "TraceLens finds no GPU work under these copy_ ops: the trace has no launch call, so it links GPU work "
    "by External id, which the flow events do not carry (they carry the correlation).",
    "no TraceLens model": "TraceLens's op map (PerfModel/torch_op_mapping.py) has no perf model for this op.",
}


def reasons(pairs: list[Pair]) -> list[str]:
    """The CONVENTIONS that explain a group of pairs (one bin, one op, the same figures differing), in order."""
    found = []
    for pair in pairs:
        b, w = bin_of(pair), what_differs(pair)
        found += [key for key in explains(pair, b, w) if key not in found]
    return found


# --- the workers -------------------------------------------------------------------------------------------------


def _external(value: object) -> str:
    """An External id as text: pandas holds TraceLens's column as floats where a row has none (2564.0 is 2564)."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def tracelens_worker(traces: list[Path]) -> None:
    """(In TraceLens's venv) print {"trace", "ops": [Op's fields], "version"} (or "error") for each trace."""
    import contextlib
    import io
    import warnings
    from importlib.metadata import version

    warnings.filterwarnings("ignore")
    from TraceLens import TreePerfAnalyzer

    for trace in traces:
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # it prints its progress
                analyzer = TreePerfAnalyzer.from_file(str(trace))
                df = analyzer.build_df_unified_perf_table()
        except Exception as e:  # a trace TraceLens cannot read is a line of the report, not the end of the run
            print(json.dumps({"trace": str(trace), "error": f"{type(e).__name__}: {e}"[:200]}), flush=True)
            continue
        ops = []
        for row in df.to_dict("records") if len(df) else []:
            if not row.get("has_perf_model"):
                continue
            covers = []
            for kernel in row.get("kernel_details") or []:
                event = analyzer.tree.get_UID2event(kernel["gpu_op_uid"]) or {}
                if (ext := event.get("args", {}).get("External id")) is not None:
                    covers.append(_external(ext))
            gflops, mib = row.get("GFLOPS"), row.get("Data Moved (MB)")
            ops.append({
                "ext": _external(row.get("External id")),
                "name": row["name"],
                "flops": float(gflops) * 1e9 if gflops is not None and math.isfinite(gflops) else None,
                "bytes": float(mib) * 2**20 if mib is not None and math.isfinite(mib) else None,
                "category": row.get("op category") or "other",
                "dims": json.loads(json.dumps(row.get("Input Dims") or [])),  # tuples to lists
                "covers": covers,
            })  # fmt: skip
        print(json.dumps({"trace": str(trace), "ops": ops, "version": version("TraceLens")}), flush=True)


def suite_category(name: str, roofline: object) -> str:
    """The suite's op by TraceLens's category names (GEMM, SDPA_fwd, NORM_bwd, elementwise, ...)."""
    r, bare = roofline, name.removeprefix("aten::")
    if name in (*r.MATMULS, *r.SCALED):
        return "GEMM"
    if name in r.GROUPED:
        return "GroupedGEMM"
    if name in r.ATTENTION:
        return "SDPA_fwd" if r.ATTENTION[name][2] == 1.0 else "SDPA_bwd"
    if name in r.CONVOLUTIONS:
        return "CONV_bwd" if name.endswith("backward") else "CONV_fwd"
    if name in r.NORMS:
        return "NORM_bwd" if "backward" in name else "NORM_fwd"
    if name in r.SOFTMAXES:
        return "softmax"
    if bare in (*r.ELEMENTWISE, *r.IN_PLACE, "copy_", "fill_", "zero_"):
        return "elementwise"
    if bare in ("sum", "mean", "amax", "amin"):
        return "reduce"
    return "embedding"  # embedding, index_select, gather, embedding_dense_backward


def suite_ops(trace: Path) -> list[dict]:
    """Op's fields of each op of the trace's `shapes` that launched GPU work in its profiled steps."""
    from common.reader import roofline
    from common.reader.build import read_trace

    read = read_trace(trace)
    launched = dict.fromkeys(str(op.external) for step in read.steps for op in step.gpu if op.external is not None)
    shapes = {str(ext): op for ext, op in read.shapes.items()}
    ops = []
    for ext in (e for e in launched if e in shapes):
        op = shapes[ext]
        flops, moved = roofline.op_work(op)
        category = suite_category(op.name, roofline)
        ops.append({"ext": ext, "name": op.name, "flops": flops, "bytes": moved, "category": category,
                    "dims": op.dims, "types": op.types})  # fmt: skip
    return ops


def suite_worker(traces: list[Path]) -> None:
    """(In the repository's environment) print the same JSON lines as tracelens_worker, from the suite's reader."""
    sys.path.insert(0, os.getcwd())
    for trace in traces:
        try:
            ops = suite_ops(trace)
        except (OSError, ValueError) as e:
            print(json.dumps({"trace": str(trace), "error": str(e)[:200]}), flush=True)
            continue
        print(json.dumps({"trace": str(trace), "ops": ops}), flush=True)


# --- the orchestrator --------------------------------------------------------------------------------------------


def is_chrome_trace(path: Path) -> bool:
    """Whether `path` holds a Chrome trace: a JSON object with a traceEvents list, gzipped or not."""
    try:
        with (gzip.open if path.name.endswith(".gz") else open)(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError, EOFError):
        return False
    return isinstance(data, dict) and isinstance(data.get("traceEvents"), list)


def fixtures(root: Path = FIXTURES) -> list[Path]:
    """Every *.json.gz and *.json under `root`, sorted."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith((".json.gz", ".json")))


def run_worker(cmd: list[str], cwd: Path, timeout: float) -> tuple[dict[str, dict], str]:
    """Run one worker: its JSON lines by trace, and what went wrong ("" where nothing did)."""
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {}, f"killed after {timeout:.0f} s"
    except OSError as e:
        return {}, str(e)
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith('{"trace"'):
            result = json.loads(line)
            found[result["trace"]] = result
    err = done.stderr.strip().splitlines()
    return found, "" if done.returncode == 0 else f"exit {done.returncode}: {err[-1] if err else ''}"[:200]


def ops_of(result: dict) -> list[Op]:
    """A worker's ops for one trace, as Ops."""
    return [Op(**{**op, "covers": tuple(op.get("covers", ()))}) for op in result.get("ops", [])]


def shapes_text(dims: list) -> str:
    """The tensor inputs' dims, "1024×32 64×32 64": scalars left out."""
    return " ".join("×".join(map(str, d)) for d in dims if isinstance(d, list) and d) or "—"


def count_table(counts: dict[str, Counter]) -> list[str]:
    """The bins by category, and a row for all of them."""
    lines = [
        "| category | ops | exact | within 1% | differs | one side: suite only / TraceLens only |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    total: Counter = Counter()
    for category, c in sorted(counts.items()):
        total += c
        lines.append(_count_row(category, c))
    return [*lines, _count_row("**all**", total)]


def _count_row(label: str, c: Counter) -> str:
    return (
        f"| {label} | {sum(c.values())} | {c['exact']} | {c['within 1%']} | {c['differs']} | "
        f"{c['suite only']} / {c['TraceLens only']} |"
    )


def groups_of(pairs: list[Pair]) -> dict[tuple[str, str, str, str], list[Pair]]:
    """The pairs that are not exact, by (category, op name, bin, the figures that differ)."""
    groups: dict[tuple[str, str, str, str], list[Pair]] = defaultdict(list)
    for pair in pairs:
        if (b := bin_of(pair)) != "exact":
            name = "triton_* (Inductor's kernels)" if pair.category == "triton" else pair.name
            groups[(pair.category, name, b, what_differs(pair))].append(pair)
    return dict(sorted(groups.items()))


def ratio_text(members: list[Pair], what: str) -> str:
    """TraceLens's figure over the suite's across a group: "1.016", "0.5472–0.9667", or the suite's 0."""
    key = "flops" if what == "FLOPs" else "bytes"
    ratios = [getattr(p.tracelens, key) / p.figure(key) for p in members if p.figure(key)]
    if not ratios:
        return f"{what} suite 0"
    low, high = min(ratios), max(ratios)
    return f"{what} TraceLens/suite " + (
        f"{low:.6g}" if math.isclose(low, high, rel_tol=1e-6) else f"{low:.6g}–{high:.6g}"
    )


def group_lines(pairs: list[Pair]) -> list[str]:
    """A line per group of ops not exact: category, op, bin, how many, the ratio of what differs, and why."""
    lines = []
    for (category, name, b, what), members in groups_of(pairs).items():
        text = f"- {category} `{name}`, {b}: {len(members)} op{'s' if len(members) > 1 else ''}"
        text += "".join(f", {ratio_text(members, w)}" for w in what.split(", ") if w)
        why = " ".join(CONVENTIONS[key] for key in reasons(members)) or "Not explained."
        lines.append(f"{text}. {why}")
    return lines


def note_lines(pairs: list[Pair]) -> list[str]:
    """Every convention that differs, with the ops it explains in `pairs`."""
    explained: Counter = Counter()
    for pair in (p for p in pairs if bin_of(p) != "exact"):
        explained.update(explains(pair, bin_of(pair), what_differs(pair)))
    return [f"- {key} (explains {explained[key]} ops here): {text}" for key, text in CONVENTIONS.items()]


def op_lines(pairs: list[Pair]) -> list[str]:
    """--ops: a row per op that differs, with both figures and their ratio."""
    rows = []
    for pair in (p for p in pairs if bin_of(p) == "differs"):
        cells = [f"`{pair.name}`", " + ".join(shapes_text(op.dims) for op in pair.suite)]
        for key in ("flops", "bytes"):
            ours, theirs = pair.figure(key), getattr(pair.tracelens, key)
            cells += [_count(ours), _count(theirs), f"{theirs / ours:.4g}" if ours and theirs is not None else "—"]
        rows.append("| " + " | ".join(cells) + " |")
    header = "| op | shapes | suite FLOPs | TraceLens FLOPs | ratio | suite bytes | TraceLens bytes | ratio |"
    return [header, "| --- | --- | --- | --- | --- | --- | --- | --- |", *rows] if rows else []


def _count(value: float | None) -> str:
    return "—" if value is None else f"{round(value):,}"


def rel(path: Path) -> str:
    """`path` from the repository's root where it is inside it."""
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def report(traces: list[Path], skipped: list[Path], ours: dict, theirs: dict, show_ops: bool) -> list[str]:
    """The whole report, in Markdown lines: per trace, the total, the notes."""
    version = next((r["version"] for r in theirs.values() if "version" in r), "?")
    lines = ["# The suite's per-op FLOPs and bytes against TraceLens", ""]
    lines.append(
        f"TraceLens {version} from AMD-AGI/TraceLens at commit {TRACELENS_COMMIT}; {len(traces)} traces"
        + (f"; skipped, not Chrome traces: {', '.join(rel(t) for t in skipped)}" if skipped else "")
        + ". Bins: exact (to 1e-9), within 1%, differs: FLOPs, and bytes where both tools give bytes; one side: one "
        "tool has a figure, the other none."
    )
    every: list[Pair] = []
    for trace in traces:
        a, b = ours.get(str(trace), {}), theirs.get(str(trace), {})
        lines += ["", f"## {rel(trace)}", ""]
        problems = [
            f"{side}: {r.get('error', 'no result')}" for side, r in (("suite", a), ("TraceLens", b)) if "ops" not in r
        ]
        if problems:
            lines.append("; ".join(problems))
            continue
        pairs = match(ops_of(a), ops_of(b))
        every += pairs
        if not pairs:
            lines.append("No op modelled by either tool.")
            continue
        lines += count_table(bin_counts(pairs))
        if groups := group_lines(pairs):
            lines += ["", *groups]
        if show_ops and (rows := op_lines(pairs)):
            lines += ["", *rows]
    lines += ["", "## Total, every trace", "", *count_table(bin_counts(every)), "", *group_lines(every)]
    lines += ["", "## Notes: the conventions that differ", "", *note_lines(every)]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, help="trace files (default: every one under tests/fixtures/)")
    parser.add_argument("--ops", action="store_true", help="also print every op that differs: shapes, figures, ratio")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per worker, all traces (default 1200)")
    parser.add_argument(
        "--tracelens-python", default="/tmp/tracelens-venv/bin/python", help="a Python with TraceLens installed"
    )
    parser.add_argument("--suite-python", help="a Python with the suite's dependencies (default: `uv run python`)")
    parser.add_argument("--worker", choices=("tracelens", "suite"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        (tracelens_worker if args.worker == "tracelens" else suite_worker)(args.traces)
        return

    candidates = [t.resolve() for t in args.traces] if args.traces else fixtures()
    traces = [t for t in candidates if is_chrome_trace(t)]
    skipped = [t for t in candidates if t not in traces]
    names = [str(t) for t in traces]
    suite_python = [args.suite_python] if args.suite_python else ["uv", "run", "python"]
    theirs, their_error = run_worker(
        [args.tracelens_python, str(HERE), "--worker", "tracelens", *names], REPO, args.timeout
    )
    ours, our_error = run_worker([*suite_python, str(HERE), "--worker", "suite", *names], REPO, args.timeout)
    for side, error in (("TraceLens", their_error), ("suite", our_error)):
        if error:
            print(f"{side} worker: {error}", file=sys.stderr)
    print("\n".join(report(traces, skipped, ours, theirs, args.ops)))


if __name__ == "__main__":
    main()
