"""The summary CLI: one row per trace, ratios to a baseline, top kernels, Markdown, plot, bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import ROOT, command, ev, tiny_cpu_trace, tiny_gpu_trace, usage_error
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.analysis.digest import top_kernels
from common.analysis.figures import summarize
from common.analysis.names import fitted_names
from common.analysis.summary import _ratio, main
from common.reader.build import parse
from common.reader.naming import short_name


def gpu_trace_data(tag: str, scale: float = 1.0) -> dict:
    """The tiny GPU trace with its GPU work `scale` times as long (and as late, so a stream still runs one thing at
    a time) and suite metadata for `tag`."""
    data = tiny_gpu_trace()
    for e in data["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["dur"] *= scale
            e["ts"] *= scale
    data["suite"] = {"script": "04_x", "tag": tag, "label": "fwd", "dtype": "bf16", "flops": 312e6, "bytes": 2039e3}
    return data


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """A folder with two GPU variants (the second's kernels twice as slow) and one CPU trace."""
    folder = tmp_path / "traces"
    (folder / "04_x").mkdir(parents=True)
    (folder / "04_x" / "a_fast.json").write_text(json.dumps(gpu_trace_data("a_fast")))
    (folder / "04_x" / "b_slow.json").write_text(json.dumps(gpu_trace_data("b_slow", 2.0)))
    (folder / "04_x" / "a_fast.txt").write_text("a profiler table, not a trace")
    (folder / "01_x").mkdir()
    (folder / "01_x" / "8_bf16_cold_eager.json").write_text(json.dumps(tiny_cpu_trace()))
    return folder


def summary(capsys, *argv: object) -> tuple[int, str, str]:
    return command(main, capsys, *argv)


def row_of(out: str, name: str) -> list[str]:
    """The cells of the text table's row for trace `name`."""
    return next(line.split() for line in out.splitlines() if line.startswith(name + " "))


def test_a_gpu_row_has_per_step_medians_launches_and_rates():
    row = summarize(parse(gpu_trace_data("a")))
    assert row.name == "04_x/a" and row.steps == 2 and row.on == "GPU"
    # of 2 steps, the later one's own figures (step 3), never their mean (1.5 kernels, which no step had)
    assert row.kernels == 1 and row.gpu_us == 31 and row.cpu_us == 40
    assert row.launches == 1  # step 2: cudaLaunchKernel + cuLaunchKernelEx, step 3: cudaLaunchKernel
    assert row.calls == {"occ. queries": 0, "memcpy": 0, "memset": 1}
    assert row.launch_apis == {"cudaLaunchKernel": 1}  # the same step's: adds up to its launches
    assert row.tflops == pytest.approx(312e6 / 31e-6 / 1e12)
    assert row.pct_flops == pytest.approx(100 * row.tflops / 312)  # the A100-SXM4-80GB bf16 peak
    assert row.pct_bytes == pytest.approx(100 * row.gbps / 2039)


def test_a_cpu_row_leaves_gpu_figures_and_percent_of_peak_empty():
    row = summarize(parse(tiny_cpu_trace()))
    assert row.kernels is None and row.gpu_us is None and row.launches is None and set(row.calls.values()) == {None}
    assert row.on == "CPU" and row.cpu_us == 70 and row.tflops == pytest.approx(1e6 / 70e-6 / 1e12)
    assert row.pct_flops is None and row.pct_bytes is None and row.peak_mb is None  # absent, never zero


def test_peak_flags_give_percent_of_peak_on_an_unknown_gpu():
    data = gpu_trace_data("a")
    data["deviceProperties"] = [{"name": "Some Future GPU"}]
    assert summarize(parse(data)).pct_flops is None
    row = summarize(parse(data), peak_tflops=100.0, peak_gbps=1000.0)
    assert row.pct_flops == pytest.approx(row.tflops) and row.pct_bytes == pytest.approx(row.gbps / 10)


def test_top_kernels_rank_by_total_time_with_short_names_and_families():
    stats = top_kernels(parse(tiny_gpu_trace()), 2)
    assert [(short_name(k.op.name), k.op.family, k.us_per_step, k.calls_per_step) for k in stats] == [
        ("ampere_sgemm_64x64_nn<…>", "gemm", 35.0, 1.0),
        ("at::native::vectorized_elementwise_kernel<…>", "pointwise", 2.5, 0.5),
    ]


def test_text_table_has_one_row_per_trace_and_dashes_for_gpu_figures_on_cpu(traces, capsys):
    code, out, err = summary(capsys, traces)
    assert code == 0 and err == ""
    assert "baseline 04_x/b_slow (the slowest; --baseline picks another)" in out
    cpu = row_of(out, "01_x/8_bf16_cold_eager")
    assert cpu[1:5] == ["—", "—", "70.0", "µs"] and cpu[-1] == "1.75"  # a CPU row: its CPU time against the baseline's
    fast = row_of(out, "04_x/a_fast")
    assert fast[1:8] == ["1", "31.0", "µs", "40.0", "µs", "1", "0"] and fast[-1] == "0.500"  # step 3's own
    assert "Top 5 GPU work of 04_x/a_fast" in out and "ampere_sgemm_64x64_nn<…>" in out
    assert "No GPU lane (CPU runs), so no kernels to list: 01_x/8_bf16_cold_eager" in out


def test_baseline_ratios_against_a_tag_or_a_path(traces, capsys):
    code, out, _ = summary(capsys, traces / "04_x", "--baseline", "a_fast", "--wide")
    assert code == 0 and row_of(out, "04_x/a_fast")[-2:] == ["1.00", "1.00"]
    assert row_of(out, "04_x/b_slow")[-2:] == ["2.00", "1.00"]  # kernels twice as long, same CPU time
    code, out, _ = summary(capsys, traces / "04_x", "--baseline", traces / "04_x" / "b_slow.json", "--wide")
    assert row_of(out, "04_x/a_fast")[-2:] == ["0.500", "1.00"]


def test_a_cpu_baseline_gives_no_gpu_ratio(traces, capsys):
    _, out, _ = summary(capsys, traces, "--baseline", "01_x/8_bf16_cold_eager", "--wide")
    assert row_of(out, "04_x/a_fast")[-2:] == ["—", "0.571"]  # 40 µs of CPU against 70


def test_an_ambiguous_or_unknown_baseline_is_one_error_line(traces, capsys):
    for wanted, why in (("04_x", "matches 2 traces"), ("nope", "matches no trace")):
        code, out, err = summary(capsys, traces, "--baseline", wanted)
        assert code == 2 and out == "" and err.count("\n") == 1 and why in err


def test_markdown_output_is_pipe_tables(traces, capsys):
    code, out, _ = summary(capsys, traces / "04_x", "--markdown", "--top", "1")
    assert code == 0 and "### Per-step summary of 2 trace(s)" in out
    assert "| trace | kernels | GPU busy | CPU | launches | memcpy | peak MB | TFLOP/s | %peak | ×base |" in out
    assert "| 04_x/b_slow | 1 | 62.0 µs | 40.0 µs | 1 | 0 | — |" in out
    assert (
        "| --- | ---: |" in out
        and "| 70.0 | 1 | 89.7 | gemm | — | — | — | — | — | — | ampere_sgemm_64x64_nn<…> |" in out
    )


def bad_input(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notrace.json").write_text("{not json")
    (tmp_path / "noevents.json").write_text(json.dumps({"traceEvents": [ev("cpu_op", "aten::add", 0, -1)]}))
    return {
        "not a readable Chrome trace": tmp_path / "notrace.json",
        "no profiler events": tmp_path / "noevents.json",
    }


def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys):
    for why, path in bad_input(tmp_path).items():
        code, out, err = summary(capsys, path)
        assert (code, out) == (2, "") and err.count("\n") == 1, why
        assert err.startswith("error: ") and why in err and str(path) in err


def test_an_unreadable_file_in_a_folder_is_one_line_and_the_others_are_summarised(traces, tmp_path, capsys):
    bad = bad_input(tmp_path)
    for path in bad.values():
        shutil.copy(path, traces / "04_x" / path.name)
    code, out, err = summary(capsys, traces)
    assert code == 0 and "04_x/a_fast" in out and "04_x/b_slow" in out and "01_x/8_bf16_cold_eager" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2, err
    for why, path in bad.items():
        assert sum(why in line and str(traces / "04_x" / path.name) in line for line in lines) == 1, (why, err)


def test_a_folder_of_only_unreadable_files_names_each_and_exits_2(tmp_path, capsys):
    bad = bad_input(tmp_path)
    code, out, err = summary(capsys, *bad.values())
    lines = err.strip().splitlines()
    assert (code, out) == (2, "") and len(lines) == 3, err
    assert all(why in line for why, line in zip(bad, lines, strict=False))
    assert lines[-1].startswith("error: none of the 2 traces could be read")


def test_missing_paths_and_empty_folders_are_skipped_with_a_notice(traces, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, out, err = summary(capsys, traces / "04_x", tmp_path / "empty", tmp_path / "missing")
    assert code == 0 and "04_x/a_fast" in out
    assert f"notice: {tmp_path / 'empty'}: no *.json" in err and f"notice: {tmp_path / 'missing'}: no such" in err
    code, out, err = summary(capsys, tmp_path / "empty", tmp_path / "missing")
    assert (code, out) == (2, "") and err.strip().splitlines()[-1].startswith("error: no traces in")


def test_bad_flags_are_one_error_line(capsys):
    assert "--top" in usage_error(lambda: main(["--top", "0", "x.json"]), capsys)


def test_plot_without_matplotlib_says_how_to_get_it(traces, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    code, out, err = summary(capsys, traces, "--plot", traces / "p.png")
    assert (code, out) == (2, "") and "uv run --extra plot" in err and err.count("\n") == 1


def test_plot_writes_a_png(traces, capsys):
    pytest.importorskip("matplotlib")
    code, out, _ = summary(capsys, traces, "--plot", traces / "p.png")
    assert code == 0 and f"plot: {traces / 'p.png'}" in out
    assert (traces / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_round_trip_of_a_real_cpu_trace_as_json_and_json_gz(tmp_path, capsys):
    path = tmp_path / "real" / "add.json"
    path.parent.mkdir()
    x = torch.randn(64, 64)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(5):
            with record_function("matmul_add"):
                torch.add(x @ x, x)
            prof.step()
    with open(path, "rb") as src, gzip.open(path.with_suffix(".json.gz"), "wb") as dst:
        shutil.copyfileobj(src, dst)
    code, out, err = summary(capsys, path.parent, "--markdown")
    assert code == 0 and err == ""
    rows = [line for line in out.splitlines() if line.startswith("| real/add")]
    assert len(rows) == 2  # add.json and add.json.gz, both named real/add
    cells = [r.split(" | ") for r in rows]
    assert cells[0][1:3] == ["—", "—"] and cells[0][3] == cells[1][3] and cells[0][3].endswith("s")
    assert float(cells[0][3].split()[0].replace(",", "")) > 0


def test_a_kernel_in_an_anonymous_namespace_keeps_a_readable_name():
    data = tiny_gpu_trace()
    softmax = "void (anonymous namespace)::cunn_SoftMaxForward<8, float>(float*, float const*, int)"
    data["traceEvents"].append(ev("kernel", softmax, 200, 500, tid=7, correlation=6))
    top = top_kernels(parse(data), 1)[0]
    assert short_name(top.op.name) == "(anonymous namespace)::cunn_SoftMaxForward<…>" and top.op.family == "softmax"


def test_the_summary_and_the_diff_start_without_torch():
    probe = "import sys, common.analysis.summary, common.analysis.diff; sys.exit('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_help_says_unreadable_files_are_skipped_and_how_stepless_traces_read(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "stops the run" not in text
    assert "exit status is 2 only when none could be read" in text
    assert "split into iterations where its top-level labels repeat" in text and "else summarised as one window" in text


def test_shortened_names_keep_the_words_that_tell_the_rows_apart(capsys):
    fixtures = ROOT / "tests" / "fixtures" / "h200"
    code, out, _ = summary(capsys, fixtures)
    lines = out.split("\n\n")[1].splitlines()[2:]
    names = [line.split("  ")[0] for line in lines]
    assert code == 0 and len(names) == len(set(names)) == len(list(fixtures.rglob("*.json.gz"))), names
    assert all(len(line) <= 120 for line in out.splitlines())
    training = [n for n in names if n.startswith("05/")]
    assert sum("cudagraphs" in n for n in training) == 2 and sum(n.endswith("_eager") for n in training) == 2


def test_names_sharing_their_words_but_one_are_cut_to_that_word():
    tags = ["1_128_768_12_3072_amp_bf16_cold_eager", "1_128_768_12_3072_fused_amp_bf16_cold_eager"]
    names = fitted_names([f"05_training_step/{t}" for t in tags], 26)
    assert sorted(names.values()) == ["05/1_128_768_12_…", "05/1_128_768_12_…_fused_…"]


def test_a_tiny_ratio_prints_as_less_than_a_thousandth_never_an_exponent():
    assert [_ratio(v) for v in (3.38e-05, 0.00106, 0.26, 1.0, 214.0, 12_345.0, None)] == [
        "< 0.001", "0.00106", "0.260", "1.00", "214", "12,345", "—"]  # fmt: skip


def ddp_rank(tag: str, rank: int, cpu_us: float) -> dict:
    """One rank of a two-rank run of 06 as the suite writes it: a GEMM and an all-reduce per step."""
    events = []
    for n, start in ((2, 0), (3, 1000)):
        events += [
            ev("user_annotation", f"ProfilerStep#{n}", start, 900),
            ev("user_annotation", "train_step", start + 1, cpu_us),
            ev("cuda_runtime", "cudaLaunchKernel", start + 2, 3, correlation=10 * n),
            ev("cuda_runtime", "cudaLaunchKernel", start + 6, 3, correlation=10 * n + 1),
            ev("kernel", "nvjet_sm90_tst_128x128_64x4", start + 5, 100, tid=7, correlation=10 * n),
            ev("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", start + 110, 50, tid=8,
               correlation=10 * n + 1),
        ]  # fmt: skip
    meta = {"script": "06_ddp_training_step", "tag": f"{tag}_rank{rank}", "label": "train_step", "rank": rank,
            "world_size": 2, "backend": "nccl"}  # fmt: skip
    info = {"backend": "nccl", "rank": rank, "world_size": 2}
    return {
        "traceEvents": events,
        "distributedInfo": info,
        "suite": meta,
        "deviceProperties": [{"name": "NVIDIA H200"}],
    }


def test_a_folder_of_three_ddp_runs_has_a_rank_table_and_a_spread_per_run(tmp_path, capsys):
    folder = tmp_path / "06_ddp_training_step"
    folder.mkdir()
    runs = {"cap25_overlap": 400, "cap25_nooverlap": 500, "cap5_overlap": 600}
    for words, cpu in runs.items():
        tag = f"8_1024_768_12_3072_{words}_amp_bf16_cold_eager"
        for rank in (0, 1):
            (folder / f"{tag}_rank{rank}.json").write_text(json.dumps(ddp_rank(tag, rank, cpu * (1 + rank / 100))))
    code, out, _ = summary(capsys, folder)
    assert code == 0
    assert all(len(line) <= 120 for line in out.splitlines()), max(out.splitlines(), key=len)
    titles = [line for line in out.splitlines() if line.startswith("Ranks of ")]
    assert len(titles) == 3 and all("(2 ranks)" in t for t in titles)
    assert sorted(w for w in runs if any(w + "_" in t for t in titles)) == sorted(runs)
    assert out.count("spread, slowest ÷ fastest rank: GPU 1×, CPU 1.01×") == 3  # never 1.5×: across runs
    names = [line.split("  ")[0] for line in out.split("\n\n")[1].splitlines()[2:]]
    assert len(names) == len(set(names)) == 6, names


def test_a_trace_with_a_very_long_name_still_prints_nothing_wider_than_120(tmp_path, capsys):
    folder = tmp_path / ("a_folder_with_a_long_name_" * 3)
    folder.mkdir()
    for i in range(2):
        data = tiny_gpu_trace()
        (folder / f"{'rank_trace_of_a_long_training_job_' * 3}{i}.json").write_text(json.dumps(data))
    code, out, _ = summary(capsys, folder, "--per-step")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 120, max(out.splitlines(), key=len)


def plot_labels(monkeypatch, capsys, *argv: object) -> list[str]:
    """The legend labels of the bars `--plot` draws for `argv`'s traces."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    labels, barh = [], Axes.barh
    monkeypatch.setattr(Axes, "barh", lambda self, *a, **kw: labels.append(kw.get("label")) or barh(self, *a, **kw))
    assert summary(capsys, *argv)[0] == 0
    return labels


def test_the_plot_legend_says_gpu_busy_is_the_union_over_streams(traces, capsys, monkeypatch):
    assert plot_labels(monkeypatch, capsys, traces, "--plot", traces / "p.png")[0] == "GPU busy (union over streams)"


def test_a_cpu_only_plot_has_no_gpu_legend_entry(traces, capsys, monkeypatch):
    cpu = traces / "01_x" / "8_bf16_cold_eager.json"
    assert plot_labels(monkeypatch, capsys, cpu, "--plot", traces / "p.png") == ["CPU (annotated region)"]


def test_a_rocm_trace_s_legend_names_the_hip_launch_calls(tmp_path, capsys):
    """ROCm traces were described with CUDA's API names (issue 30 item 5): the legend names the calls the traces
    made, cudaLaunchKernel's only where they made it."""
    data = tiny_gpu_trace()
    for e in data["traceEvents"]:
        if e.get("name") in ("cudaLaunchKernel", "cuLaunchKernelEx"):
            e["name"] = "hipLaunchKernel" if e["name"] == "cudaLaunchKernel" else "hipExtModuleLaunchKernel"
    path = tmp_path / "rocm.json"
    path.write_text(json.dumps(data))
    code, out, _ = command(main, capsys, path)
    text = " ".join(out.split())
    assert code == 0 and "launches = kernel launches (hipLaunchKernel, ...)" in text  # the median step's calls
    assert "cudaLaunchKernel" not in text


def test_help_epilog_has_no_stray_break_and_names_only_columns_its_table_shows(tmp_path, capsys):
    import re

    import common.analysis.summary

    epilog = common.analysis.summary.__doc__.split("\n\n", 2)[2].strip()  # after the purpose line and the usage
    lines = epilog.splitlines()
    widest = max(map(len, lines))
    assert [line for line in lines[:-1] if len(line) < 0.8 * widest] == []  # a paragraph broken mid-way
    (tmp_path / "t.json").write_text(json.dumps(tiny_cpu_trace()))
    _, default, _ = summary(capsys, tmp_path / "t.json")
    _, wide, _ = summary(capsys, tmp_path / "t.json", "--wide")
    header = [line for line in default.splitlines() if line.startswith("trace ")][0]
    wide_header = [line for line in wide.splitlines() if line.startswith("trace ")][0]
    for sentence in re.split(r"(?<=[.;:])\s", " ".join(lines)):
        for column in re.findall(r'column "([^"]+)"', sentence):
            assert column in header.split() or ("--wide" in sentence and column in wide_header.split()), sentence


def test_a_per_step_column_of_times_has_one_precision(tmp_path, capsys):
    from common.analysis.tables import column

    assert column([52.0, 51.43, 9844.0]) == ["52", "51", "9844"]
    assert column([85.77, 103.4, 52.82]) == ["85.8", "103.4", "52.8"]
    assert column([52.0, 51.43, None]) == ["52.00", "51.43", "—"]
    data = tiny_cpu_trace()  # its label `fwd` is the CPU column: one step of 9844 µs, two of about 50
    data["traceEvents"] = [
        event
        for i, us in enumerate((9844.0, 51.43, 52.0))
        for event in (ev("user_annotation", f"ProfilerStep#{i}", i * 20000, 19000),
                      ev("user_annotation", "fwd", i * 20000 + 5, us), ev("cpu_op", "aten::add", i * 20000 + 10, 20))
    ]  # fmt: skip
    (tmp_path / "t.json").write_text(json.dumps(data))
    _, out, _ = summary(capsys, tmp_path / "t.json", "--per-step")
    table = out[out.index("Per profiled step of") :].splitlines()[3:]
    cpu = [line.split()[1] for line in table if line.startswith("#")]
    assert cpu == ["9844", "51", "52"], cpu
