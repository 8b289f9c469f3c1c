"""--html: one self-contained page of figures per trace (its content; test_html_browser.py opens it in a browser)."""

from __future__ import annotations

import html
import json
import re
import sys

import pytest
from helpers import ROOT, command, ev, tiny_cpu_trace

from common.analysis.diagnosis import diagnose, one_time
from common.analysis.picture import picture
from common.analysis.summary import main
from common.reader.build import parse, read_trace

FIXTURES = ROOT / "tests" / "fixtures"
TRAINING = FIXTURES / "h200" / "05_training_step" / "8_1024_768_12_3072_amp_bf16_cold_eager.json.gz"


def summary(capsys, *argv: object) -> tuple[int, str, str]:
    return command(main, capsys, *argv)


def test_html_without_plotly_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)  # makes `import plotly` fail
    code, out, err = summary(capsys, TRAINING, "--html", tmp_path / "r.html")
    assert (code, out) == (2, "") and "uv run --extra html" in err and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_html_into_a_folder_is_one_error_line(tmp_path, capsys):
    code, out, err = summary(capsys, TRAINING, "--html", tmp_path)
    assert (code, out) == (2, "") and "is a folder" in err and err.count("\n") == 1


def test_the_report_inlines_plotly_and_links_nothing_outside(tmp_path, capsys):
    pytest.importorskip("plotly")
    code, out, _ = summary(capsys, TRAINING, "--html", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    from plotly.offline import get_plotlyjs

    assert code == 0 and f"html: {tmp_path / 'r.html'}" in out
    assert get_plotlyjs() in page and page.count(get_plotlyjs()[:200]) == 1  # inlined once, not per figure
    ours = page.replace(get_plotlyjs(), "")  # plotly.js names map tiles' sites, loaded by map plots only
    assert re.findall(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", ours) == []


def test_the_report_opens_with_the_verdict_and_its_lever(tmp_path, capsys):
    pytest.importorskip("plotly")
    _, out, _ = summary(capsys, TRAINING, "--html", tmp_path / "r.html", "--markdown")
    page = (tmp_path / "r.html").read_text()
    [verdict] = [line.removeprefix("- verdict: ") for line in out.splitlines() if line.startswith("- verdict:")]
    lever = verdict.split(" → ")[-1]
    body = page[page.index("<body>") :]
    assert body.index("verdict: " + html.escape(verdict)) < body.index('class="figure')
    assert f'<p class="lever">lever: {html.escape(lever)}</p>' in body


def test_the_report_shows_the_saving_the_verdict_predicts_under_its_lever(tmp_path, capsys):
    pytest.importorskip("plotly")
    _, out, _ = summary(capsys, TRAINING, "--html", tmp_path / "r.html", "--markdown")
    page = (tmp_path / "r.html").read_text()
    [verdict] = [line for line in out.splitlines() if line.startswith("- verdict:")]
    saving = re.search(r"\((saves up to [^()]*)\)$", verdict).group(1)
    assert page.index('<p class="lever">') < page.index(f'<p class="saving">predicted saving: {saving}</p>')


def test_a_lever_without_a_predicted_saving_says_it_has_none(tmp_path, capsys):
    pytest.importorskip("plotly")
    _, out, _ = summary(capsys, FIXTURES / "h200" / "01_matmul_add" / "4096_bf16_warm_eager.json.gz", "--html",
                        tmp_path / "r.html")  # fmt: skip
    page = (tmp_path / "r.html").read_text()
    assert "saves up to" not in out and '<p class="saving">predicted saving: — (the verdict predicts none' in page


def test_the_report_draws_budget_timeline_and_roofline_of_a_gpu_trace(tmp_path, capsys):
    pytest.importorskip("plotly")
    summary(capsys, TRAINING, "--html", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert [k for k in ("budget", "timeline", "roofline") if f'class="figure {k}"' in page] == [
        "budget",
        "timeline",
        "roofline",
    ]
    assert "median step" in page and "waiting for the host: launching op by op" in page
    assert page.count('<table class="sortable">') == 1  # the kernels (this trace has no collectives)


def figure_traces(page: str, kind: str) -> list[dict]:
    """The plotly traces (name, marker, ...) of the first figure of `kind` in a report."""
    div = page[page.index(f'class="figure {kind}"') :]
    return json.loads(re.search(r'Plotly\.newPlot\(\s*"fig\d+",\s*(\[.*?\]),\s*\{"template"', div, re.S).group(1))


def test_no_kernel_family_shares_a_colour_with_a_gap_cause_or_the_cpu_ops(tmp_path, capsys):
    pytest.importorskip("plotly")
    summary(capsys, TRAINING, "--html", tmp_path / "r.html")
    traces = figure_traces((tmp_path / "r.html").read_text(), "timeline")
    colour = {t["name"]: t["marker"]["color"].lower() for t in traces}
    hatched = {t["name"] for t in traces if t["marker"]["pattern"]["shape"]}
    families = {colour[name] for name in colour if name not in hatched and name != "CPU top-level op"}
    others = {colour[name] for name in hatched | {"CPU top-level op"}}
    assert len(families) >= 8 and families.isdisjoint(others)


def test_a_folder_of_ranks_stands_side_by_side_with_the_skew(tmp_path, capsys):
    pytest.importorskip("plotly")
    code, _, _ = summary(capsys, FIXTURES / "ddp_gloo", "--html", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    side = page[page.index('<div class="side">') :]
    assert code == 0 and "Collective skew across the ranks" in page
    assert side.count("<section id=") == 2 and "rank0" in side and "rank1" in side


def test_a_cpu_trace_gets_its_steps_and_timeline_but_no_roofline(tmp_path, capsys):
    pytest.importorskip("plotly")
    trace = tmp_path / "cpu.json"
    trace.write_text(json.dumps(tiny_cpu_trace()))
    code, _, _ = summary(capsys, trace, "--html", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert code == 0 and 'class="figure budget"' in page and 'class="figure timeline"' in page
    assert 'class="figure roofline"' not in page and "No GPU lane" in page


@pytest.mark.parametrize(
    "name",
    ["foreign/graph_capture.json.gz", "h200/01_matmul_add/64_bf16_cold_eager_w0u0a20.json.gz"],
)
def test_a_one_time_cost_is_its_own_bar_segment_taken_out_of_its_part(name):
    trace = read_trace(FIXTURES / name)
    verdict = diagnose(trace)
    pic = picture(trace, verdict, None, draw=False)
    assert "one-time" in verdict.verdict and sum(s.parts["one-time"] for s in pic.steps) > 0
    for bar, b in zip(pic.steps, verdict.budgets, strict=True):
        assert sum(bar.parts.values()) == pytest.approx(bar.span, abs=1e-6)
        assert min(bar.parts.values()) >= 0
        assert bar.parts["host wait"] <= b.host_wait


def cold_gpu() -> dict:
    """One window: the first copy waits 40 ms queued on a cold GPU, then 200 ops launch a kernel each."""
    events = [ev("cpu_op", "aten::to", 0, 40_050), ev("cuda_runtime", "cudaMemcpyAsync", 10, 10, correlation=1),
              ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 40_000, 2, tid=7, correlation=1),
              ev("cuda_runtime", "cudaStreamSynchronize", 30, 40_000)]  # fmt: skip
    for k in range(200):
        t = 40_100 + 50 * k
        events += [ev("cpu_op", "aten::add", t, 48),
                   ev("cuda_runtime", "cudaLaunchKernel", t + 1, 9, correlation=10 + k),
                   ev("kernel", "add_kernel", t + 11, 5, tid=7, correlation=10 + k)]  # fmt: skip
    return {"traceEvents": events}


def late_peer() -> dict:
    """12 all-gathers of 3 ms and one of 300 ms (its peer late), each before a GEMM."""
    events = []
    for k in range(13):
        t, us = 10_000 * k, 300_000 if k == 6 else 3_000
        events += [ev("cpu_op", "c10d::allgather_", t, 20), ev("cuda_runtime", "cudaLaunchKernel", t + 1, 5,
                                                                correlation=k),
                   ev("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevComm*)", t + 10, us, tid=7, correlation=k),
                   ev("cuda_runtime", "cudaLaunchKernel", t + 30, 5, correlation=100 + k),
                   ev("kernel", "gemm_kernel", t + 3_020, 500, tid=7, correlation=100 + k)]  # fmt: skip
    return {"traceEvents": events}


@pytest.mark.parametrize("made", [cold_gpu, late_peer], ids=["cold GPU (queued)", "late peer (communication)"])
def test_a_one_time_cost_off_the_host_is_in_the_one_time_segment(made):
    trace = parse(made())
    verdict = diagnose(trace)
    once = sum(one_time(trace, verdict.budgets).items.values())
    pic = picture(trace, verdict, None, draw=False)
    assert "one-time" in verdict.verdict and once > 1000
    assert sum(s.parts["one-time"] for s in pic.steps) == pytest.approx(once)


def test_a_slow_first_steps_one_time_segment_holds_its_gpu_work_too():
    """compile_in_window: step #0 compiles for 5.6 s and runs 34 ms more compute and 14 ms of copies (autotuning,
    first copies) than the steps after it; all of it is the verdict's one-time cost."""
    trace = read_trace(FIXTURES / "counterfactuals" / "compile_in_window.json.gz")
    verdict = diagnose(trace)
    first, usual = picture(trace, verdict, None, draw=False).steps[:2]
    assert first.parts["one-time"] == pytest.approx(sum(one_time(trace, verdict.budgets).items.values()))
    assert first.parts["copies"] <= usual.parts["copies"] + 1 and first.parts["compute"] < 1.01 * usual.parts["compute"]


def test_the_budget_figure_draws_the_one_time_segment(tmp_path, capsys):
    pytest.importorskip("plotly")
    summary(capsys, FIXTURES / "foreign" / "graph_capture.json.gz", "--html", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    budget = page[page.index('class="figure budget"') : page.index('class="figure timeline"')]
    assert '"name":"one-time"' in budget.replace(" ", "")
