"""A copy of a trace with one more process, "diagnosis", that Perfetto shows above the others: the verdict's evidence.

Its "steps" track holds each step's budget window (the median one named so, with the verdict in its args); its
"GPU idle gaps" track each idle gap of the GPU as a slice named by its cause (common.analysis.picture.CAUSES), and a
flow arrow runs from each gap to what held it on the CPU: the DataLoader's or the optimizer's label, else the
top-level op that overlapped the gap most (Perfetto binds the arrow's end to the innermost slice open at its time:
an op inside that one, where it has children then). A gap in no recorded op (Python), or where the GPU waited on
itself, has no arrow. Everything else of the file is copied as it was: its events, their order, the other
top-level entries. The Chrome trace format's rules are kept: complete events (ph "X") with ts, dur, pid, tid and
name; flow events (ph "s", "f") with an id no flow of the trace uses, both ends at one time, inside the gap and the
op (Perfetto pairs a flow's ends in time order), the end bound to its enclosing slice (bp "e").
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from common.analysis.picture import Picture
from common.cli import SuiteError
from common.files import write_whole

PROCESS = "diagnosis"
STEPS_TID, GAPS_TID = 1, 2
FLOW = "held by"  # the flow events' name and category, apart from Kineto's own (ac2g, fwdbwd)


def load(path: Path) -> dict | list:
    """The whole JSON of a trace file (gzipped or not); ValueError naming the file where it is not JSON."""
    import msgspec  # here, not at import: `python -m common.summary --help` stays quick

    try:
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from None
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        try:  # NaN, Infinity, a lone surrogate: what the reader's fallback reads too
            return json.loads(data)
        except ValueError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None


def _events(doc: dict | list) -> list:
    events = doc if isinstance(doc, list) else doc.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError("no traceEvents list")
    return events


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _new_pid(events: list) -> int:
    pids = [e.get("pid") for e in events if isinstance(e, dict)]
    return max([p for p in pids if isinstance(p, int) and not isinstance(p, bool)] + [0]) + 1


def _new_flow_id(events: list) -> int:
    ids = [e.get("id") for e in events if isinstance(e, dict) and e.get("ph") in ("s", "t", "f")]
    return max([i for i in ids if isinstance(i, int) and not isinstance(i, bool)] + [0]) + 1


def _holders(events: list, wanted: set[tuple[str, float]]) -> dict[tuple[str, float], tuple]:
    """(name, ts) -> (pid, tid) of the complete events of the trace that held a gap."""
    found: dict[tuple[str, float], tuple] = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        ts = _number(e.get("ts"))
        key = (e.get("name"), ts)
        if ts is not None and key in wanted and key not in found:
            found[key] = (e.get("pid"), e.get("tid"))
    return found


def marks(picture: Picture, pid: int, first_id: int, holders: dict) -> list[dict]:
    """The diagnosis' events: its process and tracks named, a slice per step window and per gap, a flow per held
    gap, ids from `first_id`."""
    out: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": PROCESS}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": STEPS_TID, "args": {"name": "steps"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": GAPS_TID, "args": {"name": "GPU idle gaps"}},
    ]
    for bar in picture.steps:
        median = bar.number == picture.median
        args: dict = {f"{part} (µs)": round(us, 3) for part, us in bar.parts.items()}
        args["window"] = {"step": "the step's CPU span", "gpu": "its GPU work's window", "cpu": "CPU span"}[bar.window]
        if median:
            args |= {"bound": picture.bound, "verdict": picture.verdict}
            if picture.budget_line:
                args["budget"] = picture.budget_line
        name = f"step #{bar.number}" + (" (median)" if median else "")
        out.append({"ph": "X", "cat": PROCESS, "name": name, "pid": pid, "tid": STEPS_TID, "ts": bar.start,
                    "dur": bar.span, "args": args})  # fmt: skip
    flow = first_id
    for gap in picture.gaps:
        if not gap.end > gap.start:
            continue
        args = {"cause": gap.cause, "µs": round(gap.end - gap.start, 3), "step": gap.step}
        if gap.held is not None:
            args["held by"] = gap.held.name
        out.append({"ph": "X", "cat": PROCESS, "name": gap.label, "pid": pid, "tid": GAPS_TID, "ts": gap.start,
                    "dur": gap.end - gap.start, "args": args})  # fmt: skip
        where = holders.get((gap.held.name, gap.held.start)) if gap.held is not None else None
        if where is None:
            continue
        # both ends at the middle of the time the op and the gap overlap: inside each, and in time order
        ts = (max(gap.held.start, gap.start) + min(gap.held.end, gap.end)) / 2
        out.append({"ph": "s", "cat": FLOW, "name": FLOW, "id": flow, "pid": pid, "tid": GAPS_TID, "ts": ts})
        out.append({"ph": "f", "bp": "e", "cat": FLOW, "name": FLOW, "id": flow, "pid": where[0], "tid": where[1],
                    "ts": ts})  # fmt: skip
        flow += 1
    return out


def annotated(path: Path, picture: Picture) -> bytes:
    """The JSON of the trace at `path` with the diagnosis' events of `picture` appended to its events."""
    doc = load(path)
    try:
        events = _events(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    wanted = {(g.held.name, g.held.start) for g in picture.gaps if g.held is not None}
    events += marks(picture, _new_pid(events), _new_flow_id(events), _holders(events, wanted))
    import msgspec

    return msgspec.json.encode(doc)


def write_annotated(path: Path, picture: Picture, out: Path) -> None:
    """Write the annotated copy of the trace at `path` to `out` (whole or not at all); SuiteError where the file
    changed since it was read and is no trace now."""
    try:
        data = annotated(path, picture)
    except ValueError as exc:
        raise SuiteError(str(exc)) from None
    write_whole(out, data)
