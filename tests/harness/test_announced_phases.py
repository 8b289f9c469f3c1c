"""A run on a laptop never leaves its reader wondering: every slow call of a script comes after a line that says it
is coming. One run per script and per README command family (script, compiled or not, warm or not, --bench or not),
at the docs' CPU shapes, with the slow calls replaced by fakes that note when they are called, beside every line
printed: no clock is read, so a loaded machine cannot fail it.
"""

from __future__ import annotations

import re
import shlex
import socket
import sys

import pytest
import torch
from helpers import ROOT, load_script, readme_commands, readme_cpu_flags

import common.harness.estimate
import common.harness.export
import common.harness.recording

ON_CPU = readme_cpu_flags()
RATES = {"gemm_rate": 50e9, "copy_rate": 10e9, "pointwise_rate": 5e9, "op_rate": 1e5, "fused_attention_rate": 20e9}
ESTIMATE = "estimate: about "

# The slow calls every run makes, and the line said before the first of each (None: the estimate line says it).
ANNOUNCED = {
    "rates": "measuring this CPU's rate for the estimate ...",
    "compile": "torch.compile: the first call compiles the ",  # only where the run compiles
    "export": "writing the trace",  # ", then the reference ..." where one is left
    "profile": "the profiled steps (",  # the script's `with profile(...)`: its steps run from here
    "warm-up": "warm-up: ",  # only where the run warms up (--warmup)
}
# A script's own slow calls: the function in the script's namespace, and the line said before its first call.
OWN = {
    "03_simple_mlp": {"geglu_reference": None},
    "04_a_naive_attention": {"reference_attention": None},
    "04_b_inplace_ops_attention": {"reference_attention": None},
    "04_c_sdpa_attention": {"reference_attention": None},
    "05_training_step": {
        "block_reference": "the reference: the block's forward in higher precision ...",
        "train_step": "the first step, the one checked against the reference ...",
    },
    "06_ddp_training_step": {"train_step": None},
}
# Phases said as each starts: the last of their lines before a phase's first call is its own (not the next's).
IN_TURN = ("warm-up", "profile")
BEHAVIOUR = ("--compile", "--warmup", "--bench")  # what changes which phases a run goes through


def families() -> dict[str, list[str]]:
    """One README command a family (its script and BEHAVIOUR flags), the first the docs print, for the scripts that
    run on a CPU: `id -> argv` (torchrun's words dropped: the test runs one rank in this process)."""
    found: dict[str, list[str]] = {}
    for command in readme_commands():
        words = shlex.split(command)[2:]
        at = next((i for i, w in enumerate(words) if re.fullmatch(r"0\w+\.py", w)), None)
        if at is None or ON_CPU.get(words[at]) is None and "06_" not in words[at] or "--cudagraphs" in words:
            continue  # not a script's command, or refused on a CPU before torch loads
        script, argv = words[at].removesuffix(".py"), words[at + 1 :]
        key = " ".join([script, *(flag for flag in BEHAVIOUR if flag in argv)])
        found.setdefault(key, [script, *argv])
    return found


FAMILIES = families()
SMALL = {**ON_CPU, "06_ddp_training_step.py": ON_CPU["05_training_step.py"]}  # 06's shape is 05's, per rank


class Noted:
    """What a run did, in order: ("line", text) for each line printed, (name,) for each slow call."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []
        self._partial = ""

    def write(self, text: str) -> int:
        *lines, self._partial = (self._partial + text).split("\n")
        self.events += [("line", line) for line in lines]
        return len(text)

    def flush(self) -> None:
        pass

    def call(self, name: str) -> None:
        self.events.append((name,))

    def first(self, name: str) -> int | None:
        return next((i for i, e in enumerate(self.events) if e == (name,)), None)

    def said_before(self, at: int, text: str) -> bool:
        return any(e[0] == "line" and e[1].startswith(text) for e in self.events[:at])

    def last_said_before(self, at: int, texts: list[str]) -> str | None:
        """Which of `texts` the last line before event `at` that starts with one of them starts with."""
        for e in reversed(self.events[:at]):
            if e[0] == "line" and (hit := next((t for t in texts if e[1].startswith(t)), None)):
                return hit
        return None

    def line_at(self, text: str) -> int | None:
        return next((i for i, e in enumerate(self.events) if e[0] == "line" and e[1].startswith(text)), None)


def noting(noted: Noted, name: str, fn):
    def noted_call(*args, **kwargs):
        noted.call(name)
        return fn(*args, **kwargs)

    return noted_call


def fake_compile(noted: Noted):
    """torch.compile that compiles nothing: its first call is noted, then the function runs eagerly."""

    def compile_(model=None, **kwargs):
        called = []

        def first_call(*args, **kw):
            if not called:
                called.append(True)
                noted.call("compile")
            return model(*args, **kw)

        return first_call

    return compile_


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def noted(monkeypatch) -> Noted:
    """Every run estimated and its estimate said (however small), each rate measured afresh by a noted fake, the
    compile faked, the trace export and the script's own slow calls noted."""
    noted = Noted()
    estimate = common.harness.estimate
    for name, value in RATES.items():
        monkeypatch.setattr(estimate, name, lambda *a, name=name, value=value: noted.call("rates") or value)
    monkeypatch.setattr(estimate, "_measured", {})
    monkeypatch.setattr(estimate, "_COMPILE_SAID", [])
    for name in ("MEASURE_ABOVE_FLOPS", "MEASURE_ABOVE_BYTES", "SAY_ABOVE_S"):
        monkeypatch.setattr(estimate, name, 0.0)
    monkeypatch.setattr(torch, "compile", fake_compile(noted))
    write = common.harness.export.TraceFiles.write
    monkeypatch.setattr(common.harness.export.TraceFiles, "write", noting(noted, "export", write))
    enter = torch.profiler.profile.__enter__
    monkeypatch.setattr(torch.profiler.profile, "__enter__", noting(noted, "profile", enter))
    warm_up = common.harness.recording.Recording.warm_up

    def noted_warm_up(self, step):  # the warm-up's calls of the step are what is slow
        return warm_up(self, noting(noted, "warm-up", step))

    monkeypatch.setattr(common.harness.recording.Recording, "warm_up", noted_warm_up)
    return noted


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_slow_phase_is_announced_before_it_starts(family, noted, monkeypatch, tmp_path):
    script, *argv = FAMILIES[family]
    module = load_script(script)
    own = OWN.get(script, {})
    for name in own:
        monkeypatch.setattr(module, name, noting(noted, name, getattr(module, name)))
    if script.startswith("06_"):  # one rank in this process, as torchrun would start it
        for key, value in dict(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1").items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(free_port()))
    flags = [*argv, *SMALL[f"{script}.py"], "--device", "cpu", "--traces-dir", str(tmp_path)]
    monkeypatch.setattr(sys, "stdout", noted)
    threads = torch.get_num_threads()
    try:
        code = module.main(flags)
    finally:
        torch.set_num_threads(threads)
        monkeypatch.undo()
    assert code == 0, noted.events[-20:]
    expected = {**ANNOUNCED, **own}
    if "--compile" not in argv:
        del expected["compile"]
    if "--warmup" not in argv:
        del expected["warm-up"]
    said = noted.line_at(ESTIMATE)
    assert said is not None, "no estimate line"
    for name, line in expected.items():
        at = noted.first(name)
        assert at is not None, f"{name} was never called"
        if name != "rates":  # the estimate is made from the rates, and said before everything else that is slow
            assert said < at, f"{name} ran before the estimate was said"
        assert line is None or noted.said_before(at, line), f"{name} ran without '{line}' before it"
    in_turn = {name: line for name, line in expected.items() if line and (name in IN_TURN or name in own)}
    for name, line in in_turn.items():
        last = noted.last_said_before(noted.first(name), list(in_turn.values()))
        assert last == line, f"{name} ran after '{last}', said after '{line}'"


def test_the_families_cover_every_script_that_runs_on_a_cpu_and_each_behaviour():
    scripts = {family.split()[0] for family in FAMILIES}
    assert scripts == {s.removesuffix(".py") for s, flags in SMALL.items() if flags is not None}
    for flag in BEHAVIOUR:
        assert any(flag in family.split() for family in FAMILIES), flag


def test_setup_says_it_imports_dynamo_before_a_training_script_s_optimizer(monkeypatch, capsys, tmp_path):
    """torch.optim's Optimizer.__init__ imports torch._dynamo: 4 s unannounced in an eager 05 on a 2-core CPU."""
    import types

    import common.harness.runtime as runtime

    imported = []
    monkeypatch.delitem(sys.modules, "torch._dynamo")
    fake = types.SimpleNamespace(import_module=lambda name: imported.append((name, capsys.readouterr().out)))
    monkeypatch.setattr(runtime, "importlib", fake)
    args = runtime.make_parser(None).parse_args(["--device", "cpu", "--traces-dir", str(tmp_path)])
    runtime.setup(args, "05_training_step.py", optimizer=True)
    ((name, said),) = imported
    assert name == "torch._dynamo"
    assert said.endswith("importing torch._dynamo, which torch.optim's optimizers load ...\n")


@pytest.mark.parametrize("script", ["05_training_step", "06_ddp_training_step"])
def test_a_script_that_builds_an_optimizer_tells_setup_so(script):
    source = (ROOT / f"{script}.py").read_text()
    assert "torch.optim." in source and re.search(r"setup\([^)]*optimizer=True", source)
