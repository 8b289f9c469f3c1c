"""What the tests share: run a numbered script, load one as a module, read what a run wrote."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

from common.harness.runtime import resolve_dtype
from common.reader.build import read_trace

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "h200"
# The pages a reader reads: the README, docs/ and the benchmarks' README; every command in them is tested.
DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]


def docs_text() -> str:
    """Every page of DOC_PAGES, one after the other."""
    return "\n\n".join(page.read_text() for page in DOC_PAGES)


SCRIPTS = sorted(p.stem for p in ROOT.glob("0*.py"))


def readme_commands() -> list[str]:
    """The `uv run` and `uvx` lines of the code blocks of DOC_PAGES, comments removed, in order, each once."""
    found = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", docs_text(), re.S | re.M):
        for line in block.splitlines():
            if line.startswith(("uv run ", "uvx ")):
                found.append(re.sub(r"\s+#.*$", "", line).strip())
    return list(dict.fromkeys(found))


def readme_cpu_flags() -> dict[str, list[str] | None]:
    """The docs' table of what the README test appends on a CPU: script -> flags, or None where it is refused."""
    text = docs_text()
    table = text[text.index("| script | on a CPU, the README test appends |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        script, what = (cell.strip() for cell in line.strip("|").split("|"))
        rows[script.strip("`")] = None if what.startswith("refused") else shlex.split(what.strip("`"))
    return rows


CPU_DTYPE = resolve_dtype(None, torch.device("cpu"))[0]  # a CPU run's default here: bf16 where native, else fp32

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_kernels = pytest.mark.skipif(importlib.util.find_spec("kernels") is None, reason="needs the kernels package")


def load_script(name: str) -> ModuleType:
    """Import `<ROOT>/<name>.py` (names start with digits, so plain import can't)."""
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_benchmark(name: str) -> ModuleType:
    """Import `<ROOT>/benchmarks/<name>.py` (benchmarks/ is no package) as the module `name`, with benchmarks/ on
    sys.path for the modules it imports (subproc, estimate_accuracy) and registered while its file runs (dataclasses
    look their module up)."""
    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run(name: str, traces_dir: Path, *flags: str) -> int:
    """`<name>.main([...flags, "--traces-dir", traces_dir])`: a script end to end, in this process, on the CPU
    unless `flags` name a --device (so a test means the same on a machine with a GPU)."""
    device = [] if "--device" in flags else ["--device", "cpu"]
    return load_script(name).main([*flags, *device, "--traces-dir", str(traces_dir)])


# Start a Python program with SIGINT, SIGTERM and SIGHUP at their defaults, whatever this test process
# inherited (a runner under nohup ignores SIGHUP, one started in the background of a script SIGINT): the
# scripts keep a signal ignored when they start with it ignored.
DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)
PYTHON = (sys.executable, "-c", DEFAULT_SIGNALS)  # `python`, its signals at their defaults: `[*PYTHON, "-m", ...]`


STARTED: list[subprocess.Popen] = []  # what start_script started; tests/conftest.py ends those left after a test

# `python -c MARKING LABEL N script.py ...`: the script, its signals at their defaults, that writes `MARKED` to
# stderr as it enters its N-th `record_function(LABEL)` (the N-th step's work begins): a test sends its signal then,
# knowing the profiled steps are under way. The loop and the harness run as they are; the mark is a write(2).
MARK = "MARKED"
MARKING = (
    "import os, runpy, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, signal.SIG_DFL)\n"
    "label, n, script, *rest = sys.argv[1:]\n"
    "import torch.autograd.profiler as ap\n"
    "enter, calls = ap.record_function.__enter__, [0]\n"
    "def marking(self):\n"
    "    out = enter(self)\n"
    "    if self.name == label:\n"
    "        calls[0] += 1\n"
    "        if calls[0] == int(n):\n"
    f"            os.write(2, b'{MARK}\\n')\n"
    "    return out\n"
    "ap.record_function.__enter__ = marking\n"
    "sys.argv = [script, *rest]\n"
    "runpy.run_path(script, run_name='__main__')\n"
)


def marking(label: str, call: int) -> tuple[str, ...]:
    """The `prefix` for start_script that marks the `call`-th entry of `record_function(label)` (MARKING)."""
    return (sys.executable, "-c", MARKING, label, str(call))


def wait_for_mark(proc: subprocess.Popen) -> list[str]:
    """Read the run's stderr up to the MARK line (the step is under way); the lines before it. Fails if the run
    ends first."""
    before = []
    for line in proc.stderr:
        if line.strip() == MARK:
            return before
        before.append(line)
    raise AssertionError(f"the run ended before its mark: {''.join(before)[-2000:]}")


def start_script(name: str, *flags: str, traces: Path, prefix: tuple[str, ...] | None = None) -> subprocess.Popen:
    """`python <name>.py FLAGS --traces-dir traces` in its own process, output unbuffered, its signals at their
    defaults; `prefix` runs it under another command instead (`nohup`), inheriting this process's signals. A
    process the test leaves running is killed when the test ends (end_started)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    launch = list(PYTHON if prefix is None else prefix)
    proc = subprocess.Popen(
        [*launch, str(ROOT / f"{name}.py"), *flags, "--traces-dir", str(traces)], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    STARTED.append(proc)
    return proc


def end_started() -> None:
    """Kill every process start_script started that still runs, reap it and close its pipes: a test that failed
    before its own wait leaves no script running (and no open pipe) into the next test."""
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=30)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


@contextlib.contextmanager
def cpu_view(native_bf16: bool):
    """Run the block as on a CPU with native bf16 (AVX512-BF16) or on one with AVX2 and FMA only, whichever this
    machine is: the suite decides from common.harness.machine.cpu_flags and ONEDNN_MAX_CPU_ISA, both set here."""
    import common.harness.machine as machine

    flags = {"avx", "avx2", "fma", *(("avx512_bf16",) if native_bf16 else ())}
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        patch.delenv("DNNL_MAX_CPU_ISA", raising=False)
        patch.setattr(machine, "cpu_flags", lambda: flags)
        yield


def command(main: Callable[[list[str]], int], capsys: pytest.CaptureFixture, *argv: object) -> tuple[int, str, str]:
    """`main(argv)` of a command (the summary, the diff): its exit code, stdout and stderr."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def diff_parts(out: str) -> tuple[list[str], str, str]:
    """A text diff's lead, as common.analysis.diff prints it: the bound lines under its title, the line that says what
    its CPU column is, and its one-sentence headline (unwrapped)."""
    paragraphs = out.split("\n\n")
    at = next(i for i, p in enumerate(paragraphs) if p.startswith("CPU = "))
    lead = paragraphs[0].splitlines()
    bounds = lead[next(i for i, line in enumerate(lead) if line.startswith("bound: ")) :]
    return bounds, paragraphs[at].splitlines()[0], " ".join(paragraphs[at + 1].split())


def usage_error(call: Callable[[], object], capsys: pytest.CaptureFixture) -> str:
    """Run `call`, expect the suite's bad-input exit (code 2, one `error:` line on stderr) and return that line."""
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    return err


def trace_names(path: Path) -> set[str]:
    """Every event name in an exported Chrome trace."""
    return {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}


def written(folder: Path) -> list[Path]:
    """Every file under `folder` (hidden temporaries included), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file())


# Hand-made traces for the reader and the summary


def ev(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    """One complete ("X") Chrome-trace event."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launched(t: float, name: str, us: float, corr: int, gpu_at: float | None = None, op: str = "",
             op_us: float = 8) -> list[dict]:  # fmt: skip
    """A launch at `t` (inside an op `op` of `op_us` where given) of a kernel `name` of `us` µs, run at `gpu_at`
    (else t + 5)."""
    out = [ev("cpu_op", op, t, op_us)] if op else []
    out += [ev("cuda_runtime", "cudaLaunchKernel", t + 1, 4, correlation=corr),
            ev("kernel", name, t + 5 if gpu_at is None else gpu_at, us, tid=7, correlation=corr)]  # fmt: skip
    return out


def tiny_gpu_trace() -> dict:
    """Two profiled steps on a GPU. Step 2's kernels run after its CPU span ends (the GPU lags):
    only the correlation id ties them to step 2."""
    return {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
            ev("kernel", "warmup_kernel", 1, 1, tid=7, correlation=99),  # launched before any step
            ev("user_annotation", "ProfilerStep#2", 10, 100),
            ev("user_annotation", "fwd", 12, 80),
            ev("cpu_op", "aten::matmul", 14, 30),
            ev("cpu_op", "aten::mm", 15, 28),
            ev("cuda_runtime", "cudaOccupancyMaxActiveBlocksPerMultiprocessor", 16, 1, correlation=1),
            ev("cuda_runtime", "cudaLaunchKernel", 18, 3, correlation=2),
            ev("cpu_op", "aten::add", 50, 10),
            ev("cuda_driver", "cuLaunchKernelEx", 52, 3, correlation=3),
            ev("cuda_runtime", "cudaMemcpyAsync", 56, 2, correlation=4),
            ev("gpu_user_annotation", "fwd", 20, 60, tid=7),  # the label's GPU projection, not a kernel
            ev("kernel", "void ampere_sgemm_64x64_nn<float>(int)", 20, 40, tid=7, correlation=2),
            ev("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 61, 5, tid=7, correlation=3),
            ev("gpu_memcpy", "Memcpy DtoD (Device -> Device)", 67, 2, tid=7, correlation=4),
            ev("user_annotation", "ProfilerStep#3", 110, 50),
            ev("user_annotation", "fwd", 112, 40),
            ev("cpu_op", "aten::mm", 114, 20),
            ev("cuda_runtime", "cudaMemsetAsync", 115, 1, correlation=5),
            ev("cuda_runtime", "cudaLaunchKernel", 117, 3, correlation=6),
            ev("gpu_memset", "Memset (Device)", 170, 1, tid=7, correlation=5),
            ev("kernel", "void ampere_sgemm_64x64_nn<float>(int)", 172, 30, tid=7, correlation=6),
            {"ph": "f", "id": 6, "pid": 1, "tid": 7, "ts": 172, "cat": "ac2g", "name": "ac2g"},
        ],
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
    }


def tiny_cpu_trace() -> dict:
    return {
        "traceEvents": [
            ev("user_annotation", "ProfilerStep#0", 0, 100),
            ev("user_annotation", "fwd", 5, 60),
            ev("cpu_op", "aten::add", 10, 20),
            ev("user_annotation", "ProfilerStep#1", 100, 100),
            ev("user_annotation", "fwd", 105, 80),
            ev("cpu_op", "aten::add", 110, 20),
            ev("cpu_op", "aten::add", 140, 20),
            ev("user_annotation", "ProfilerStep#2", 200, 100),
            ev("user_annotation", "fwd", 205, 70),
            ev("cpu_op", "aten::add", 210, 20),
        ],
        "suite": {"script": "01_x", "tag": "8_bf16_cold_eager", "label": "fwd", "flops": 1e6, "bytes": 1e3},
    }


# The reader's own edits of a script's profiler loop (tests/harness/test_edited_loops.py)

RANGE = "range(args.wait + args.warmup_steps + args.active)"
STEPS = RANGE[len("range(") : -1]
LOOP_LABEL = r'(for _ in range\(.*\):\n\s+with record_function\()"(\w+)"'
SHAPES_OPTION = r"(\n( *)record_shapes=True,)"
TENSORBOARD = "torch.profiler.tensorboard_trace_handler"
LOOP_EDITS: dict[str, list[tuple[str, str]]] = {  # edit -> (regex, replacement) pairs, each matching once
    "active=2": [(r"active=args\.active", "active=2"), (re.escape(RANGE), "range(args.wait + args.warmup_steps + 2)")],
    "wait=0, warmup=0": [
        (r"wait=args\.wait, warmup=args\.warmup_steps", "wait=0, warmup=0"),
        (re.escape(RANGE), "range(args.active)"),
    ],
    "repeat=2": [(r"repeat=1\)", "repeat=2)"), (re.escape(RANGE), f"range(2 * ({STEPS}))")],
    "more steps than the schedule": [(re.escape(RANGE), f"range({STEPS} + 4)")],
    "label renamed": [(LOOP_LABEL, r'\1"my_label"')],
    "with_stack=True": [(SHAPES_OPTION, r"\1\n\2with_stack=True,")],
    "with_flops=True": [(SHAPES_OPTION, r"\1\n\2with_flops=True,")],
    "profile_memory=True": [(r"profile_memory=args\.memory", "profile_memory=True")],
    "record_shapes removed": [(r"\n *record_shapes=True,", "")],
    "schedule removed": [(r"\n *schedule=schedule\(.*\),", "")],
    "tensorboard_trace_handler": [(r"on_trace_ready=rec\.save", f"on_trace_ready={TENSORBOARD}(TB_DIR)")],
}
# The reader's edits of the model a script profiles: edit -> (regex, replacement) pairs, each matching once
MODEL_EDITS: dict[str, list[tuple[str, str]]] = {
    "gelu -> silu": [(re.escape('F.gelu(g, approximate="tanh")'), "F.silu(g)")],  # 03_simple_mlp's GeGLU
    "x four times as tall": [  # 01_matmul_add's x and b stacked four times: [4N, N] @ [N, N] + [4N, N]
        (r"\n(\s+)fn = torch\.compile", r"\n\1x, b = torch.cat([x] * 4), torch.cat([b] * 4)\n\1fn = torch.compile")
    ],
}
# Small shapes each script runs on the CPU in well under a second a step
TINY_FLAGS = {
    "01_matmul_add": ["--size", "16"],
    "02_linear": ["--batch", "8", "--in_dim", "8", "--out_dim", "8"],
    "03_simple_mlp": ["--batch", "2", "--seq", "8", "--dim", "32", "--hidden", "64"],
    "03_kernels_mlp": ["--batch", "2", "--seq", "8", "--dim", "32", "--hidden", "64"],
    "04_a_naive_attention": ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8"],
    "04_b_inplace_ops_attention": ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8"],
    "04_c_sdpa_attention": ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8", "--backend", "math"],
    "04_d_kernels_attention": ["--batch", "1", "--heads", "2", "--seq", "64", "--head_dim", "64"],
    "05_training_step": ["--batch", "1", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64"],
    "06_ddp_training_step": ["--batch", "1", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64"],
}


def report_lines(out: str) -> dict[str, str]:
    """The lines of a run's report that say what it measured: `loop` (the `profiled:` line, unwrapped), `notes`
    (the notes in brackets under it), `guess` (guess vs trace's title; the corrected one where a script shows
    the post's first guess too), `checked` (its closing count), `marks` (its lines' marks, `[ ok ]`, `[MISS]`
    or `[ -- ]`, one a line) and `step` (the step time); '' where absent."""
    lines = out.splitlines()
    found = dict.fromkeys(("loop", "notes", "guess", "checked", "marks", "step"), "")
    for i, line in enumerate(lines):
        if line.startswith("profiled: "):
            more = [m.strip() for m in itertools.takewhile(lambda m: m.startswith("  "), lines[i + 1 :])]
            at = next((n for n, m in enumerate(more) if m.startswith("(")), len(more))
            found["loop"], found["notes"] = " ".join([line, *more[:at]]), "\n".join(more[at:])
        elif line.startswith("guess vs trace"):
            found["guess"], found["marks"], found["checked"] = line, "", ""
        elif re.match(r"  (>>> \d+ of \d+ checked|all \d+ checked)", line) and found["guess"]:
            found["checked"] = found["checked"] or line.strip()
        elif re.match(r"  \[( ok |MISS| -- )\] ", line) and found["guess"] and not found["checked"]:
            found["marks"] += line[2:8] + "\n"
        elif line.startswith("step time: "):
            found["step"] = line
    return found


def edit_loop(source: str, edit: str, tb_dir: Path) -> str:
    """`source` with `edit` (a key of LOOP_EDITS) applied; each of its patterns must match exactly once."""
    for pattern, replacement in {**LOOP_EDITS, **MODEL_EDITS}[edit]:
        source, n = re.subn(pattern, replacement, source)
        assert n == 1, f"{edit}: {pattern!r} matched {n} times"
    return source.replace("(TB_DIR)", f"({str(tb_dir)!r})")


def load_edited(name: str, edit: str, folder: Path, tb_dir: Path) -> ModuleType:
    """A copy of script `name` with `edit` applied, written to `folder` and imported from there."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(edit_loop((ROOT / f"{name}.py").read_text(), edit, tb_dir))
    spec = importlib.util.spec_from_file_location(f"edited_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_edited(name: str, edit: str, folder: Path, *flags: str) -> dict:
    """Run a copy of script `name` with `edit` applied, in this process, on the CPU at TINY_FLAGS (plus `flags`),
    writing under `folder`; what it printed and what it wrote, read back: for each trace its steps and label."""
    traces, tb_dir = folder / "traces", folder / "tb"
    script = load_edited(name, edit, folder / "scripts", tb_dir)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = script.main([*TINY_FLAGS[name], *flags, "--device", "cpu", "--traces-dir", str(traces)])
        except SystemExit as exc:
            code = exc.code
    written_traces = {}
    for path in sorted((traces / name).glob("*.json")):
        trace = read_trace(path)
        written_traces[path.name] = {"steps": len(trace.steps), "label": trace.label, "meta": trace.meta}
    return {
        "code": code,
        "out": out.getvalue(),
        "err": err.getvalue(),
        "traces": written_traces,
        "tensorboard": sorted(p.name for p in tb_dir.glob("*.json")) if tb_dir.is_dir() else [],
        "tb_dir": str(tb_dir),
    }


def comms_trace(rank: int, world: int, late_us: float = 0.0, calls: list[dict] | None = None) -> dict:
    """Two profiled steps of one rank, each issuing an all_reduce (record_param_comms, `calls` its args) whose NCCL
    kernel starts 10 µs after its launch, everything `late_us` later on this rank."""
    calls = calls or [{"Collective name": "allreduce", "In msg nelems": 1 << 20, "Out msg nelems": 1 << 20,
                       "Group size": world, "dtype": "Float", "Process Group Name": "0"}]  # fmt: skip
    events = []
    for step in range(2):
        t0 = 1000.0 * step
        events.append(ev("user_annotation", f"ProfilerStep#{step + 1}", t0, 900))
        for k, args in enumerate(calls):
            ts, corr = t0 + 100 + 200 * k + late_us, 10 * step + k + 1
            events += [
                ev("cpu_op", "record_param_comms", ts, 50, **args),
                ev("cuda_runtime", "cudaLaunchKernel", ts + 10, 5, correlation=corr),
                ev("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                   ts + 20, 100, tid=7, correlation=corr),
            ]  # fmt: skip
    info = {"backend": "nccl", "rank": rank, "world_size": world}
    return {"traceEvents": events, "distributedInfo": info, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}
