"""benchmarks/silences.py: which waits a README command's lines announce, read from stamped lines (no clock)."""

from __future__ import annotations

from helpers import load_benchmark


def test_a_wait_after_a_phase_or_progress_line_is_announced_any_other_is_not():
    silences = load_benchmark("silences").silences
    stamped = [
        (0.1, "importing torch ...\n"),
        (6.0, "CPU threads: 2\n"),
        (7.5, "the profiled steps (5 calls of the step, as the schedule asks) ...\n"),
        (17.5, "... 10.0 s of about 12 s estimated: the profiled steps\n"),
        (20.0, "profiled: schedule(wait=1, warmup=1, active=3, repeat=1)\n"),
        (20.1, "table: traces/x.txt\n"),
    ]
    s = silences(stamped, end=20.3)
    assert s["first"] == 0.1
    assert round(s["announced"], 6) == 10.0  # the steps, until the progress line
    assert round(s["unannounced"], 6) == 1.5 and s["before"] == "CPU threads: 2"
    assert round(s["tail"], 6) == 0.2


def test_a_readme_command_runs_as_the_reader_types_it_with_its_traces_elsewhere(tmp_path):
    module = load_benchmark("silences")
    text = "```\nuv run torchrun --standalone --nproc-per-node 1 06_ddp_training_step.py --batch 1  # one rank\n```\n"
    (command,) = module.readme_commands(text)
    assert module.argv(command, tmp_path) == [
        "uv", "run", "--no-sync", "torchrun", "--standalone", "--nproc-per-node", "1",
        "06_ddp_training_step.py", "--batch", "1", "--traces-dir", str(tmp_path),
    ]  # fmt: skip
