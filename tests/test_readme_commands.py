"""Every command README.md and docs/ print works as printed: read from those pages, run, exit 0 (or refused in one line
where the README says so), nothing wider than 120 columns.

The script commands run in this process through `main(argv)`, with the smaller shapes the README's table
gives for a CPU appended, into a `traces/` folder of a scratch directory; the summary and diff commands then
run in that directory, where `tests/` leads to the committed fixtures.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import ROOT, cpu_view, docs_text, load_script, readme_commands, readme_cpu_flags

from common.analysis.diff import main as diff_main
from common.analysis.summary import main as summary_main

README = docs_text()  # README.md, docs/*.md, benchmarks/README.md
WIDTH = 120


def commands() -> list[str]:
    """The `uv run` and `uvx` lines of the README's code blocks, comments removed, in order, each once."""
    return readme_commands()


def cpu_flags() -> dict[str, list[str] | None]:
    """The README's table of what the test appends on a CPU: script -> flags, or None where it is refused."""
    return readme_cpu_flags()


@dataclass
class Result:
    code: int
    out: str
    err: str


def call(main, argv: list[str], stdout_to: Path | None = None) -> Result:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    if stdout_to is not None:
        stdout_to.write_text(out.getvalue())
    return Result(code, out.getvalue(), err.getvalue())


def words(command: str) -> tuple[str, list[str], Path | None]:
    """What a command runs (a script stem, `common.analysis.summary` or `common.analysis.diff`), its argv, and a `>
    file`."""
    argv = shlex.split(command)[2:]
    target = None
    if ">" in argv:
        target, argv = Path(argv[argv.index(">") + 1]), argv[: argv.index(">")]
    if argv[:2] == ["--extra", "plot"]:
        argv = argv[2:]
    if argv[:2] == ["python", "-m"]:
        return argv[2], argv[3:], target
    return argv[0].removesuffix(".py"), argv[1:], target


ALL = commands()
SCRIPT_COMMANDS = [c for c in ALL if re.match(r"uv run 0\w+\.py", c)]
ON_CPU = cpu_flags()


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, dict[str, Result]]:
    """Every script command of the README, run once, in order, into <scratch>/traces."""
    scratch = tmp_path_factory.mktemp("readme")
    (scratch / "tests").symlink_to(ROOT / "tests")
    threads = torch.get_num_threads()
    results = {}
    cwd = os.getcwd()
    os.chdir(scratch)
    try:
        for command in SCRIPT_COMMANDS:
            name, argv, _ = words(command)
            extra = ON_CPU[f"{name}.py"] if not torch.cuda.is_available() else []
            results[command] = call(load_script(name).main, [*argv, *(extra or []), "--traces-dir", "traces"])
            torch.set_num_threads(threads)
        yield scratch, results
    finally:
        os.chdir(cwd)


def test_the_readme_prints_its_commands():
    assert (
        len(SCRIPT_COMMANDS) >= 20 and any("common.diff" in c for c in ALL) and any("common.summary" in c for c in ALL)
    )
    assert set(ON_CPU) == {p.name for p in ROOT.glob("0*.py")}  # the table covers every script


def check(command: str, result: Result, refused: bool) -> None:
    if refused:
        assert result.code == 2, result.out + result.err
        assert len(result.err.splitlines()) == 1 and "needs a CUDA GPU" in result.err, result.err
    else:
        assert result.code == 0, result.out[-2000:] + result.err
    if "--markdown" in command:
        return  # a document for a Markdown viewer, not a terminal
    for line in (result.out + result.err).splitlines():
        assert len(line) <= WIDTH, f"{command}: {len(line)} columns: {line}"


@pytest.mark.slow
@pytest.mark.parametrize("command", SCRIPT_COMMANDS)
def test_script_command(ran, command):
    name = words(command)[0]
    gpu_only = ON_CPU[f"{name}.py"] is None or "--cudagraphs" in command  # CUDA graphs need a GPU
    check(command, ran[1][command], gpu_only and not torch.cuda.is_available())


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in ALL if "common.summary" in c or "common.diff" in c])
def test_summary_and_diff_command(ran, command):
    if "--plot" in command:
        pytest.importorskip("matplotlib")
    module, argv, target = words(command)
    cwd = os.getcwd()
    os.chdir(ran[0])
    try:
        result = call({"common.summary": summary_main, "common.diff": diff_main}[module], argv, target)
        check(command, result, refused=False)
        for written in [target] if target else []:
            assert written.stat().st_size > 0 and written.parent.name == "traces"
        if "--plot" in argv:
            plot = Path(argv[argv.index("--plot") + 1])
            assert plot.parent.name == "traces" and plot.read_bytes()[:4] == b"\x89PNG"
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("command", [c for c in ALL if c.startswith("uvx ") or c == "uv run pytest"])
def test_network_and_suite_commands_are_left_to_their_own_tests(command):
    network = "needs the network and a Hub login (tests/harness/test_share.py)"
    pytest.skip(network if "uvx" in command else "the suite itself")


def masked(line: str) -> str:
    """A line with its numbers and its dtype masked: what any CPU's run of the command prints the same."""
    dtype = re.sub(r"(?<![a-z0-9])(bf16|fp16|fp32)(?![a-z0-9])", "DTYPE", line)  # in a tag too: 64_bf16_cold
    return re.sub(r"\d[\d.,]*(e[-+]?\d+)?", "#", dtype).strip()


def unwrapped(lines: list[str]) -> list[str]:
    """Lines with their wrapped continuations (indented six spaces) joined back on."""
    out: list[str] = []
    for line in lines:
        if line.startswith("      ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


@pytest.mark.slow
def test_the_readme_s_cpu_output_is_what_its_first_command_prints(tmp_path):
    """The output block under the set-up commands: each of its lines, numbers and dtype masked, is a line the
    command prints on a CPU with native bf16, as the README says its sample is, whatever this CPU is (the rules
    that fire, and the profiler table, depend on the run and are left out)."""
    block = re.search(r"^```text\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)[1].splitlines()
    # Left out: the rules that fire and the profiler table (they depend on the run), two lines a process says
    # once (the compiler's import, the tiny step's one thread), which this test's process may have said, and the
    # line a script run as __main__ says before torch loads (this test calls main; test_early_refusals pins it)
    # The verdict's words follow the run's timings (where a CPU emulates bf16 its GEMM holds more of the step): it is
    # checked to be there, not word for word.
    left_out = ("  rule:", "(the profiler table", "importing torch", "notice: a tiny step", "verdict:")
    shown = [line for line in unwrapped(block) if not line.startswith(left_out)]
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(tmp_path)
    try:
        with cpu_view(native_bf16=True):
            result = call(load_script("01_matmul_add").main, ["--traces-dir", "traces"])
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)
    assert result.code == 0, result.err
    printed = {masked(line.replace(f"{tmp_path}/", "")) for line in unwrapped((result.out + result.err).splitlines())}
    missing = [line for line in shown if masked(line) not in printed]
    assert len(shown) >= 20 and not missing, missing
    assert any(line.startswith("verdict: ") for line in printed)
