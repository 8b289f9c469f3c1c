"""Issue 46's holdout6 cases (judged at 558faa6, then designed on) as small synthetic traces: each pins a change of
the verdict's model."""

from __future__ import annotations

from helpers import ev

from common.analysis.diagnosis import diagnose
from common.reader.build import parse

LOADER = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def loader_trace(nexts: list[tuple[float, float]]) -> str:
    """A recording with no steps: DataLoader __next__ labels at (ts, dur), each followed by a 300 µs forward of
    three ops."""
    events = [ev("user_annotation", LOADER, ts, dur) for ts, dur in nexts]
    for ts, dur in nexts:
        events += [ev("cpu_op", "aten::addmm", ts + dur + 10 + 100 * k, 90) for k in range(3)]
    return diagnose(parse({"traceEvents": events})).verdict


def test_a_multiprocessing_loader_s_first_next_is_the_workers_start_not_a_call_for_more_workers():
    """jeolkorpi_vae_eval: one 12.5 s __next__, the iterator's first, waiting for freshly spawned workers, was told
    'raise num_workers', which makes that start longer. Its lever is persistent workers and later batches."""
    line = loader_trace([(0, 12_000_000)])
    assert line.startswith("data-loading-bound on the CPU"), line
    assert "its first __next__ (12.0 s) starts the worker processes, once" in line, line
    assert "persistent_workers=True" in line and "raise num_workers" not in line, line


def test_a_multiprocessing_loader_that_is_slow_every_batch_is_told_to_grow_and_reads_as_english():
    """Steady slow batches with workers on: the next lever (more workers, cheaper items), after a 'try' that reads
    (it read 'try the DataLoader has workers already')."""
    line = loader_trace([(k * 2_000, 1_500) for k in range(6)])
    assert "→ try a larger or cheaper DataLoader (it has workers already: _MultiProcessingDataLoaderIter)" in line, line
    assert "persistent_workers" not in line, line
