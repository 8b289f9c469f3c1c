"""The collectives table and the skew across ranks (common.analysis.collectives), and how the summary prints them."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT, command, comms_trace, tiny_gpu_trace

from common.analysis.collectives import arrivals, collective_rows, skews, straggler_lines
from common.analysis.summary import main
from common.analysis.tables import TEXT_WIDTH
from common.reader.build import parse, read_trace

COLLECTIVES = ROOT / "tests" / "fixtures" / "foreign" / "collectives.json.gz"
GLOO = ROOT / "tests" / "fixtures" / "ddp_gloo"


def section(out: str, title: str) -> list[str]:
    """The lines of the summary's part that starts with `title`, up to the next blank line after its table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i]), len(lines))
    return lines[start:end]


def test_the_h200_table_has_one_call_a_step_of_each_kind_and_size():
    rows = collective_rows(read_trace(COLLECTIVES))
    assert [(r.kind, r.bytes, r.calls_per_step, r.group_size) for r in rows] == [
        (kind, size, 1.0, 1) for size in (4 << 20, 64 << 20) for kind in
        ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    ]  # fmt: skip


def test_algbw_is_bytes_over_the_mean_and_one_rank_has_no_bus_bandwidth():
    trace = read_trace(COLLECTIVES)
    rows = {(r.kind, r.bytes): r for r in collective_rows(trace)}
    gather = rows["all_gather", 64 << 20]
    copies = [c.us for c in trace.collectives if c.kind == "all_gather" and c.bytes == 64 << 20]
    assert gather.mean_us == pytest.approx(sum(copies) / 3)
    assert gather.algbw_gbps == pytest.approx((64 << 20) / (gather.mean_us / 1e6) / 1e9)
    assert all(r.busbw_gbps is None for r in rows.values())  # n = 1: no bus
    assert rows["all_reduce", 4 << 20].algbw_gbps is None  # no work ran: no time, no rate


def test_bus_bandwidth_is_the_algorithm_bandwidth_times_the_kind_s_factor():
    [row] = collective_rows(parse(comms_trace(0, 4)))  # 4 MiB all_reduce in 100 µs on 4 ranks
    assert row.algbw_gbps == pytest.approx((4 << 20) / 100e-6 / 1e9)
    assert row.busbw_gbps == pytest.approx(row.algbw_gbps * 2 * 3 / 4)


def test_a_rank_arriving_late_by_a_known_amount_is_the_straggler_by_that_amount():
    ranks = {r: arrivals(parse(comms_trace(r, 2, late_us=300.0 * r))) for r in (0, 1)}
    [skew] = skews(ranks)
    assert (skew.kind, skew.calls, skew.straggler, skew.last_in) == ("all_reduce", 2, 1, 2)
    assert skew.arrival_spread_us == pytest.approx(300.0) and skew.max_spread_us == pytest.approx(300.0)
    assert skew.duration_spread_us == 0.0


def test_a_large_skew_names_the_straggler_and_a_small_one_does_not():
    late = skews({r: arrivals(parse(comms_trace(r, 2, late_us=300.0 * r))) for r in (0, 1)})
    near = skews({r: arrivals(parse(comms_trace(r, 2, late_us=5.0 * r))) for r in (0, 1)})
    assert [line.split(" arrives")[0] for line in straggler_lines(late)] == ["straggler: rank 1"]
    assert straggler_lines(near) == []


def test_the_two_gloo_ranks_match_every_call_and_rank_0_arrives_last():
    [skew] = skews({t.rank: arrivals(t) for t in map(read_trace, sorted(GLOO.glob("*.json.gz")))})
    assert (skew.kind, skew.calls, skew.straggler, skew.last_in) == ("all_reduce", 12, 0, 12)
    assert 4000 < skew.arrival_spread_us <= skew.max_spread_us < 6000  # µs: rank 1 waits ~5 ms for rank 0


def test_calls_of_another_kind_at_the_same_place_are_not_matched():
    other = {"Collective name": "broadcast", "In msg nelems": 8, "Out msg nelems": 8, "Group size": 2,
             "dtype": "Float", "Process Group Name": "0"}  # fmt: skip
    assert skews({0: arrivals(parse(comms_trace(0, 2))), 1: arrivals(parse(comms_trace(1, 2, calls=[other])))}) == []


def test_the_summary_prints_the_collectives_and_the_skew_within_120_columns(capsys):
    code, out, _ = command(main, capsys, GLOO, COLLECTIVES)
    tables = section(out, "Collectives of foreign/collectives") + section(out, "Collective skew across")
    assert code == 0 and max(map(len, out.splitlines())) <= TEXT_WIDTH
    assert any(line.startswith("reduce_scatter  0      1  Float  64 MiB") for line in tables)
    assert any("rank 0" in line and "12/12" in line for line in tables)
    assert "Collectives: n = ranks in the process group" in out and "Skew: each call matched" in out


def test_explain_names_the_straggler_of_the_gloo_ranks(capsys):
    _, plain, _ = command(main, capsys, GLOO)
    _, explained, _ = command(main, capsys, GLOO, "--explain")
    assert "straggler: rank 0 arrives last at 12 of 12 all_reduce calls" in explained
    assert "straggler: rank" not in plain


def test_a_trace_without_collectives_has_no_collectives_table(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tiny_gpu_trace()))
    _, out, _ = command(main, capsys, path)
    assert "Collectives" not in out and "Collective skew" not in out


def test_a_long_unknown_collective_and_group_name_are_cut_to_fit_120_columns(tmp_path, capsys):
    args = {"Collective name": "x" * 150, "In msg nelems": 8, "Out msg nelems": 8, "Group size": 2,
            "dtype": "Float", "Process Group Name": "g" * 150}  # fmt: skip
    path = tmp_path / "t.json"
    path.write_text(json.dumps(comms_trace(0, 2, calls=[args])))
    code, out, _ = command(main, capsys, path)
    [row] = section(out, "Collectives of")[3:]
    assert code == 0 and row.startswith("x" * 15 + "…  " + "g" * 11 + "…") and len(row) <= TEXT_WIDTH
