"""Each README command run on the CPU, its estimate (common.harness.estimate) against the time it took.

Usage (from the repository root): `uv run python benchmarks/estimate_accuracy.py [--only SUBSTR ...] [--list]
[--pages README.md docs/training-step.md ...] [--burners N]`. `--burners N` keeps N busy-loop processes running
beside the commands (a loaded laptop); the CPU view is the environment's (`ONEDNN_MAX_CPU_ISA=AVX2
ATEN_CPU_CAPABILITY=avx2` imitates an AVX2-only CPU), said in the header.

The commands are the README's ``` blocks' `uv run <script>.py ...`, `uv run torchrun ... <script>.py ...` and
`python3 <script>.py ...` lines (a `$ ` prompt and a trailing `# comment` dropped); each runs as
`python <script>.py ... --device cpu --traces-dir <temp>` (torchrun as `python -m torch.distributed.run`) in a
fresh process, through this file's `--one` mode: it wraps common.harness.recording's `estimate` to note the estimate
(also the ones below the printed threshold) and the moment it was made, then runs the script as `__main__`. The
table gives, per command: the estimate, the run's own time (from the estimate to the script's end: what the
estimate covers), torch.compile's time inside it (torch._dynamo's own timings: each frame's compile and a
backward compiled at its first call), the ratio of the run less that to the estimate of its steps, the ratio of
the whole run to the whole estimate (its tabled compile counted: common.harness.estimate.compile_cost), and the
whole process's wall time (Python and torch's start included); then the estimate as the run's first call checked
it (common.harness.estimate.checked_lines: the corrected one, or the same where it held within 2x) and the run
against it. A command refused
on the CPU (GPU only) says so; a run too small to estimate shows "-".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "estimate_accuracy:"  # the --one mode's line on stderr
SCRIPT = re.compile(r"^\d\d_\w+\.py$")


@dataclass(frozen=True)
class Command:
    """One README command: the line as printed, and what runs it here."""

    line: str
    script: str  # e.g. 01_matmul_add.py
    args: tuple[str, ...]
    torchrun: tuple[str, ...] = ()  # torchrun's own flags, for a torchrun line

    def argv(self, traces_dir: Path) -> list[str]:
        """The command as run here: the script through --one, on the CPU, its traces in `traces_dir`."""
        one = [str(Path(__file__).resolve()), "--one", self.script, *self.args, "--device", "cpu"]
        one += ["--traces-dir", str(traces_dir)]
        if self.torchrun:
            return [sys.executable, "-m", "torch.distributed.run", *self.torchrun, *one]
        return [sys.executable, *one]


def readme_commands(text: str) -> list[Command]:
    """The numbered scripts' commands in the ``` blocks of `text` (a README), in order, each once."""
    commands: list[Command] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
        for raw in block.splitlines():
            line = raw.strip().removeprefix("$ ")
            if not line.startswith(("uv run ", "python ", "python3 ")):
                continue
            words = shlex.split(line, comments=True)
            if words[:2] == ["uv", "run"]:
                words = words[2:]
            elif words[:1] in (["python"], ["python3"]):
                words = words[1:]
            else:
                continue
            torchrun: tuple[str, ...] = ()
            if words[:1] == ["torchrun"]:
                at = next((i for i, w in enumerate(words) if SCRIPT.match(w)), None)
                if at is None:
                    continue
                torchrun, words = tuple(words[1:at]), words[at:]
            if not words or not SCRIPT.match(words[0]):
                continue
            command = Command(re.split(r"\s+#", line)[0].strip(), words[0], tuple(words[1:]), torchrun)
            if command not in commands:
                commands.append(command)
    return commands


COMPILING = ("_compile.compile_inner", "compile_fx.<locals>.bw_compiler")  # torch._dynamo's timings of compiling


def compiling_s() -> float:
    """Seconds torch.compile has spent compiling in this process so far (0 where torch._dynamo is not loaded)."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return 0.0
    return sum(sum(dynamo.compilation_time_metrics.get(key, ())) for key in COMPILING)


def one(script: str, args: list[str]) -> None:
    """Run `script` as `__main__` with `args`, noting its estimate and when it was made on stderr at the end."""
    sys.path.insert(0, str(ROOT))
    import common.harness.recording  # noqa: PLC0415 (after the path is set)

    noted: dict[str, float | None] = {}
    made = common.harness.recording.estimate

    def noting(*a, **kw):
        start = time.perf_counter()
        guess = made(*a, **kw)
        at = time.perf_counter()
        steps_s = guess.seconds - guess.compile_s if guess else None  # the compile's tabled part apart
        noted.update(estimate_s=steps_s or None, tabled_compile_s=guess.compile_s if guess else None, at=at,
                     calibrate_s=at - start, compiled=compiling_s())  # fmt: skip
        return guess

    def say(code: object) -> None:  # the note, on stderr, once the script's main has returned
        end = time.perf_counter()
        rc = code if isinstance(code, int) else (0 if code is None else 1)
        run_s = end - noted["at"] if "at" in noted else None
        compile_s = compiling_s() - noted["compiled"] if "at" in noted else None
        note = {"rank": int(os.environ.get("RANK", "0")), "rc": rc, "run_s": run_s, "compile_s": compile_s}
        note.update({k: noted.get(k) for k in ("estimate_s", "tabled_compile_s", "calibrate_s", "checked_s")})
        print(MARK + json.dumps(note), file=sys.stderr, flush=True)

    import common.harness.torchrun  # noqa: PLC0415

    leave = (
        common.harness.torchrun.exit_rank
    )  # 06 ends its ranks with os._exit (common.harness.torchrun.exit_rank): note before that

    def noting_exit(main):
        def noted_main():
            try:
                code = main()
            except SystemExit as exc:
                code = exc.code
            say(code)
            return code

        leave(noted_main)

    import common.cli  # noqa: PLC0415

    ended = common.cli.end_process  # 01-05 end with os._exit (common.cli.end_process): note before that too

    def noting_end(code: int | None) -> None:
        say(code)
        ended(code)

    check = common.harness.recording.checked_lines

    def noting_check(run, guess, took_s):
        lines, corrected = check(run, guess, took_s)
        total = corrected if corrected is not None else guess.seconds if guess else None
        noted.update(checked_s=total - guess.compile_s if total is not None else None, took_s=took_s)
        return lines, corrected

    common.harness.recording.checked_lines = noting_check
    common.harness.recording.estimate, common.harness.torchrun.exit_rank = noting, noting_exit
    common.cli.end_process = noting_end
    sys.argv = [script, *args]
    try:
        runpy.run_path(str(ROOT / script), run_name="__main__")
    except SystemExit as exc:
        say(exc.code)
        raise
    say(0)
    raise SystemExit(0)


def fmt(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3g} s"


def marked(stderr: str) -> list[dict]:
    """The --one mode's notes in a run's stderr: each MARK and the JSON after it, wherever it starts (torchrun's
    ranks share one stderr, so one rank's note can begin in the middle of another's line); a cut-off one is left
    out."""
    notes, decoder, at = [], json.JSONDecoder(), stderr.find(MARK)
    while at >= 0:
        try:
            note, _ = decoder.raw_decode(stderr, at + len(MARK))
        except ValueError:
            note = None
        if isinstance(note, dict):
            notes.append(note)
        at = stderr.find(MARK, at + len(MARK))
    return notes


def measure(command: Command, timeout: float) -> dict:
    """Run `command` here and read back its estimate, its own time and its wall time."""
    with tempfile.TemporaryDirectory() as traces:
        start = time.perf_counter()
        try:
            done = subprocess.run(command.argv(Path(traces)), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"why": f"killed after {timeout:.0f} s", "wall_s": time.perf_counter() - start}
        wall = time.perf_counter() - start
    notes = marked(done.stderr)
    note = min(notes, key=lambda n: n["rank"]) if notes else {}
    errors = [x for x in (done.stdout + done.stderr).splitlines() if x.startswith("error:")]
    last = [x for x in done.stderr.splitlines() if x.strip() and MARK not in x][-1:]
    why = "" if done.returncode == 0 else (errors or [f"exit {done.returncode}: {' '.join(last)[:200]}"])[0]
    return {**note, "wall_s": wall, "why": why}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        nargs="+",
        default=[""],
        help="run only the commands whose line is one of these, or"
        " holds one (a line of the pages, as --list prints it)",
    )
    parser.add_argument("--burners", type=int, default=0, help="busy-loop processes to run beside (default: 0)")
    parser.add_argument(
        "--pages", nargs="+", default=["README.md"], help="the pages whose commands run (default: README.md)"
    )
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a command may take (default: 900)")
    args = parser.parse_args(argv)
    if args.one:
        one(args.one[0], args.one[1:])
    text = "\n".join((ROOT / page).read_text() for page in args.pages)
    exact = [c for c in readme_commands(text) if c.line in args.only]
    commands = exact or [c for c in readme_commands(text) if any(o in c.line for o in args.only)]
    if args.list:
        print("\n".join(c.line for c in commands))
        return 0
    pages = ", ".join(args.pages)
    view = " ".join(f"{k}={os.environ[k]}" for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)]
    try:
        print(f"{len(commands)} commands of {pages} on the CPU ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
              f", {args.burners} burners, {view or 'native CPU view'})")  # fmt: skip
        return table(commands, args.timeout)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def table(commands: list[Command], timeout: float) -> int:
    """Run each command and print its row, then the worst misses of the estimate and of the checked one."""
    print("| command | estimate | run | compiling in it (tabled) | (run - compiling) / estimate | run / (estimate + "
          "tabled) | checked estimate | (run - compiling) / checked | before it (rates, profiler import) | "
          "wall (process) |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    worst, worst_checked = 1.0, 1.0
    for command in commands:
        got = measure(command, timeout)
        est, took, compile_s = got.get("estimate_s"), got.get("run_s"), got.get("compile_s") or 0.0
        whole = (est or 0.0) + (got.get("tabled_compile_s") or 0.0)  # what the run said, its compile counted
        total = f"{took / whole:.2f}" if whole and took else "-"
        if whole and took and not got["why"]:
            worst = max(worst, took / whole, whole / took)
        took = took - compile_s if took else took
        ratio = f"{took / est:.2f}" if est and took else "-"
        if est and took and not got["why"]:
            worst = max(worst, took / est, est / took)
        wall = fmt(got["wall_s"]) + (f" ({got['why']})" if got["why"] else "")
        run_s, compiled, before = fmt(got.get("run_s")), fmt(got.get("compile_s")), fmt(got.get("calibrate_s"))
        if got.get("tabled_compile_s"):
            compiled += f" ({fmt(got['tabled_compile_s'])})"
        checked = got.get("checked_s")
        against = f"{took / checked:.2f}" if checked and took else "-"
        if checked and took and not got["why"]:
            worst_checked = max(worst_checked, took / checked, checked / took)
        cells = [f"`{command.line}`", fmt(est), run_s, compiled, ratio, total, fmt(checked), against, before, wall]
        print("| " + " | ".join(cells) + " |", flush=True)
    print(f"worst miss: {worst:.2f}x; of the checked estimate: {worst_checked:.2f}x "
          f"(load now {os.getloadavg()[0]:.1f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
