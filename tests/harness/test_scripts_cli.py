"""Every script's command line: documented defaults, the first guess replayed, --memory, allocation failures."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from helpers import CPU_DTYPE, FIXTURES, SCRIPTS, load_script, requires_cuda, run, usage_error

from common.harness.guess import check_guess
from common.harness.runtime import make_parser
from common.reader.build import read_trace

SMALL = ["--batch", "1", "--heads", "2", "--seq", "32", "--head_dim", "8"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_option_states_its_default(name, monkeypatch):
    parsers = []
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", lambda self, argv=None: parsers.append(self) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        load_script(name).main([])
    options = [a for a in parsers[0]._actions if a.option_strings and a.dest != "help"]
    assert len(options) > len(make_parser(None)._actions) - 2
    for action in options:
        assert "default:" in (action.help or ""), f"{name} {action.option_strings[0]}: {action.help}"


def test_the_post_s_first_guess_misses_on_the_cpu_before_the_corrected_one(tmp_path, capsys):
    assert run("04_a_naive_attention", tmp_path, *SMALL, "--first-guess") == 0
    out = capsys.readouterr().out
    first, corrected = out.index("the post's first guess vs trace"), out.index("\nguess vs trace")
    assert first < out.index("[MISS] aten::clone        guess    0  trace     1") < corrected
    assert "all 6 checked guesses match the trace" in out[corrected:]


def test_the_post_s_first_guess_misses_the_memcpy_on_the_h200():
    trace = read_trace(FIXTURES / "04_a_naive_attention" / "8_16_1024_64_bf16_cold_eager.json.gz")
    verdicts = check_guess(trace, load_script("04_a_naive_attention").first_guess())
    assert [(v.expect.kind, v.matched) for v in verdicts] == [("kernel", True), ("memcpy", False), ("cpu_op", False)]


def test_memory_on_the_cpu_says_the_snapshot_is_gpu_only_and_records_memory_events(tmp_path, capsys):
    assert run("04_a_naive_attention", tmp_path, *SMALL, "--memory") == 0
    out = capsys.readouterr().out
    assert "memory snapshot: GPU-only" in out and "memory: GPU-only" in out
    folder = tmp_path / "04_a_naive_attention"
    assert not list(folder.glob("*.pickle"))
    events = json.loads((folder / f"1_2_32_8_{CPU_DTYPE}_cold_eager_memory.json").read_text())["traceEvents"]
    assert any(e.get("name") == "[memory]" for e in events)  # profile_memory=True: the CPU allocator's events


def test_a_memory_run_sits_beside_the_plain_run_instead_of_replacing_it(tmp_path):
    assert run("04_a_naive_attention", tmp_path, *SMALL) == 0
    folder = tmp_path / "04_a_naive_attention"
    plain = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert run("04_a_naive_attention", tmp_path, *SMALL, "--memory") == 0
    after = {p.name: p.read_bytes() for p in folder.iterdir()}
    tag = f"1_2_32_8_{CPU_DTYPE}_cold_eager"
    assert sorted(after) == sorted([f"{tag}.json", f"{tag}.txt", f"{tag}_memory.json", f"{tag}_memory.txt"])
    assert {name: after[name] for name in plain} == plain
    tags = [read_trace(folder / name).meta["tag"] for name in after if name.endswith(".json")]
    assert sorted(tags) == [tag, f"{tag}_memory"]


@pytest.mark.gpu
@requires_cuda
def test_memory_on_a_gpu_writes_a_snapshot_beside_the_trace(tmp_path, capsys):
    assert run("04_a_naive_attention", tmp_path, "--seq", "256", "--memory", "--device", "cuda") == 0
    snapshot = tmp_path / "04_a_naive_attention" / "8_16_256_64_bf16_cold_eager_memory.pickle"
    assert snapshot.stat().st_size > 1000 and f"memory snapshot: {snapshot}" in capsys.readouterr().out
    meta = json.loads(snapshot.with_suffix(".json").read_text())["suite"]["memory"]
    scores = 8 * 16 * 256 * 256 * 2
    assert meta["peak_bytes"] >= 2 * scores and meta["allocated_per_step_bytes"] >= 3 * scores


def test_an_allocation_failure_past_the_check_is_one_line(tmp_path, capsys, monkeypatch):
    def no_memory(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 320000000000 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(torch, "randn", no_memory)
    err = usage_error(lambda: run("01_matmul_add", tmp_path, "--size", "8"), capsys)
    assert err.startswith("error: out of CPU memory at these sizes") and "try smaller shapes" in err
