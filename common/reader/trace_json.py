"""Chrome trace files as JSON: stream the `traceEvents` of a trace (plain or gzipped) a block at a time.

msgspec decodes the events into `Event` structs that keep only the fields the reader uses; the other fields
are skipped unread. An event's `args` is kept undecoded (a msgspec.Raw into the block) until `args_of` asks for
it: the reader decodes the args of the few events that use them (GPU work, launches, the ops whose work is
modelled), not those of every cpu_op record_shapes writes. The file is read in blocks of `BLOCK_BYTES`: each block's
run of whole events (up to one of the last `}, {` of its first BLOCK_BYTES at which msgspec decodes `[` + run +
`]` as a list; where there is none near there, after any value: `[], [],`) is decoded in one call, in place in
the buffer (no copy), and handed on as one list; the rest waits for the next block, so memory stays near one
block. Where no such run is found (one value larger than the block) the reader waits for twice as many bytes
before it tries again, so even one huge value is read in time linear in its size. An element that is not an
object is not an event: it is dropped, decoded as msgspec decodes `[]` or a scalar, or left undecoded (a Raw:
nothing of it is built) where it is larger. Input msgspec refuses but the standard library reads (NaN and
Infinity, a lone surrogate escape) is decoded by `json` for that block alone; a lone surrogate is kept in the
name, as `json` reads it, and the tables print it escaped.

Of the top-level entries before the events (the header) and after them (the tail), only those the reader uses
(HEADER_KEYS: suite, deviceProperties, computeProperties, distributedInfo) are decoded and returned, each if its
JSON takes at most MAX_KEPT_BYTES (else the file is refused, naming the entry); the others are skipped unread.

Memory is bounded whatever the file holds: whitespace between events (or before the JSON) is read past
without being kept, and one event (or the header before the events, or what follows them) larger than
MAX_EVENT_BYTES is refused, naming the byte where it starts; JSON broken before the end of a block is refused
at once, naming the byte where it breaks (a file of zeros after `[` stops at its second byte). The buffer holds
at most MAX_EVENT_BYTES and a little more, and what is built from it about a block's worth of values: a file of
tens of MB of small values the reader does not keep (`[]`, numbers, `{}` in an entry it skips) is read in some
30 to 110 MiB (benchmarks/bounded_memory.py measures it). A field or args entry of another type than the reader
uses (an event whose `tid`, `ts` or `grid` holds an array of objects) is read field by field, each left a Raw,
and is None; a shape (RAW_FIELDS) over MAX_KEPT_BYTES is no shape. What is decoded whole is what the reader
keeps: an event's fields and args entries of their types, an entry of the header or tail (at most
MAX_KEPT_BYTES), and, where msgspec refuses the JSON (NaN), the run or the header or the tail `json` then reads.

Without msgspec (no wheel for this platform, or a plain `python3` that lacks it) the standard library's `json`
decodes the same runs of the same blocks, with the same events, answers and bounds (a kept entry's size that of
its JSON as json.dumps writes it), slower; the first read says so in one line on stderr. `json` cannot skip a
value unbuilt: a run of small elements is still a block's worth, but the header and the tail, and one huge
element, are decoded whole, each up to MAX_EVENT_BYTES of JSON (tens of Python bytes per byte of `{},`: about 1.2
GB for 45 MB of `{}` in an entry).
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import math
import os
import re
import stat
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import make_dataclass
from pathlib import Path
from typing import Any, BinaryIO

from common.files import kind_of

try:
    import msgspec
except ImportError:  # the standard library reads the trace instead (see the module's docstring)
    msgspec = None

BLOCK_BYTES = 1 << 20  # how much is read at a time
MAX_EVENT_BYTES = 64 << 20  # the largest event (or run of whitespace, header, tail) the reader takes
# The top-level entries the reader keeps (common.reader.build reads them), each decoded only where its JSON takes
# at most MAX_KEPT_BYTES; every other entry before or after the events is skipped unread.
HEADER_KEYS = ("suite", "deviceProperties", "computeProperties", "distributedInfo")
MAX_KEPT_BYTES = 1 << 20
ARGS_FIELDS = {  # the entries of an event's `args` the reader uses: attribute -> key; None where absent
    "correlation": "correlation",  # ties a GPU event to the launch that made it
    "grid": "grid",
    "block": "block",
    "registers": "registers per thread",
    "shared_memory": "shared memory",
    "occupancy": "est. achieved occupancy %",
    "external": "External id",  # ties a cpu_op to the kernels it launched (record_shapes' ops to their kernels)
    "external_2021": "external id",  # the same on a GPU event of 2021's Kineto (torch 1.8-1.9), in lower case
    # record_param_comms' description of a collective (common.reader.comms)
    "collective": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "group_size": "Group size",
    "dtype": "dtype",
    "group": "Process Group Name",
}
# The args of GPU work and of a launch, each entry typed as the reader keeps it (an id an int or text, dims whole
# numbers, counts whole, a figure a float). Where every entry has its type (a trace as torch writes it) msgspec's
# decoding is the whole reading: `typed_args`. Where one has not (a float or bool id, dims of floats, a number out
# of msgspec's range, args that are not an object), it gives None, and the reader reads them loosely (args_of).
GPU_ARGS = [
    ("correlation", int | str | None),
    ("grid", tuple[int, ...] | None),
    ("block", tuple[int, ...] | None),
    ("registers", int | None),
    ("shared_memory", int | None),
    ("occupancy", float | None),
    ("external", int | str | None),
    ("external_2021", int | str | None),
]
LAUNCH_ARGS = [("correlation", int | str | None)]
# Entries of a GEMM's or attention op's args kept undecoded (msgspec.Raw: a reference into the block, decoded by
# `decoded` once per distinct shape, and their bytes the shape's key).
RAW_FIELDS = {"dims": "Input Dims", "types": "Input type", "concrete": "Concrete Inputs"}
# One element of `traceEvents`, with the fields the reader uses (and `args`, undecoded: see Event). A name that is
# not a string is None; a `ts` or `dur` that is absent or not a number is NaN, so one check (finite, not
# negative) finds them; a `tid` or `pid` that is not a number, text, bool or null is None (an array is not built).
EVENT_FIELDS = [
    ("ph", str | None, None),
    ("cat", str | None, ""),  # "" where absent (the legacy autograd export), None where not a string
    ("name", str | None, None),
    ("ts", float, math.nan),
    ("dur", float, math.nan),
    ("tid", Any, None),
    ("pid", Any, None),  # read for the legacy export alone: its GPU lane is pid "CUDA functions"
]

if msgspec is not None:  # typed structs: msgspec skips every other field unread
    SCALAR = int | float | str | bool | None
    # An entry of another type (an object, nested arrays) is None: a figure the reader would not use, not built.
    Args = msgspec.defstruct(
        "Args",
        [*((f, SCALAR | list[SCALAR], None) for f in ARGS_FIELDS), *((f, msgspec.Raw, None) for f in RAW_FIELDS)],
        rename={**ARGS_FIELDS, **RAW_FIELDS},
        gc=False,
    )
    LooseArgs = msgspec.defstruct(  # Args where an entry is not of its type: each undecoded
        "LooseArgs",
        [(f, msgspec.Raw, None) for f in (*ARGS_FIELDS, *RAW_FIELDS)],
        rename={**ARGS_FIELDS, **RAW_FIELDS},
        gc=False,
    )
    GpuArgs = msgspec.defstruct(
        "GpuArgs", [(f, t, None) for f, t in GPU_ARGS], rename={f: ARGS_FIELDS[f] for f, _ in GPU_ARGS}, gc=False
    )
    LaunchArgs = msgspec.defstruct("LaunchArgs", [(f, t, None) for f, t in LAUNCH_ARGS], gc=False)
    # `args` undecoded: a Raw (any JSON value), None where absent; `args_of` decodes it.
    Event = msgspec.defstruct(
        "Event",
        [*((f, SCALAR if f in ("tid", "pid") else t, d) for f, t, d in EVENT_FIELDS), ("args", msgspec.Raw, None)],
        gc=False,
    )
    # An object that is not an Event as msgspec types it (a field not of its type): each field undecoded.
    LooseEvent = msgspec.defstruct("LooseEvent", [(f, msgspec.Raw, None) for f in Event.__struct_fields__], gc=False)
else:  # the same fields, for the standard library's reading
    Args = make_dataclass("Args", [(f, Any, None) for f in (*ARGS_FIELDS, *RAW_FIELDS)], slots=True)
    Event = make_dataclass("Event", [*EVENT_FIELDS, ("args", Any, None)], slots=True)


def _stdlib_args(value: object) -> Args | None:
    """The `Args` of an event's `args` as the standard library decodes it (a dict), None where it is not one."""
    if not isinstance(value, dict):
        return None
    return Args(
        *(value.get(key) for key in ARGS_FIELDS.values()),
        *(_as_raw(value.get(key)) for key in RAW_FIELDS.values()),
    )  # fmt: skip


def args_of(value: object) -> Args | None:
    """An event's `args` (its `Event.args`) as an `Args`: decoded here from msgspec's Raw (JSON msgspec read
    whole already, so it decodes), as it is where it was decoded already (without msgspec, or in a block the
    standard library read); None where it is absent or not an object."""
    if msgspec is None or not isinstance(value, msgspec.Raw):
        return value
    try:
        return _ARGS.decode(value)
    except msgspec.ValidationError:  # not an object, an entry of another type, a number out of msgspec's range
        pass
    with memoryview(value) as first:
        if first[:1] != b"{":
            return None
    raw = _LOOSE_ARGS.decode(value)  # each entry read as it can be, none built whole
    return Args(*(_loose(getattr(raw, f), _ARG) for f in ARGS_FIELDS), *(getattr(raw, f) for f in RAW_FIELDS))


def typed_args(value: object, decoder: msgspec.json.Decoder | None) -> object | None:
    """An event's `args` decoded by `decoder` (of GpuArgs or LaunchArgs: `GPU_ARGS_DECODER`, `LAUNCH_ARGS_DECODER`)
    where each entry has the type it names; None where one has not, or the args are absent or not a Raw (read
    them with args_of)."""
    if decoder is None or not isinstance(value, msgspec.Raw):
        return None
    try:
        return decoder.decode(value)
    except msgspec.ValidationError:
        return None


def decoded(value: object) -> object:
    """A RAW_FIELDS entry as JSON decodes it (`value` itself where it was decoded already, without msgspec);
    None where it is not JSON, or takes more than MAX_KEPT_BYTES (no shape: a value the reader keeps is bounded)."""
    if msgspec is None or not isinstance(value, msgspec.Raw):
        return value
    if len(value) > MAX_KEPT_BYTES:
        return None
    try:
        return msgspec.json.decode(value)
    except msgspec.DecodeError:
        return None


def _text_key(value: object) -> object:
    return repr(value)


# A RAW_FIELDS entry (not None) as a hashable key: its bytes (a Raw; `bytes` itself, the fastest call), or its
# text (decoded already, without msgspec).
raw_key = bytes if msgspec is not None else _text_key


class _Said:
    fallback = False  # the one line about reading without msgspec was printed


def say_fallback() -> None:
    """Without msgspec, say once (in this process and the ones it forks after) that traces are read with `json`."""
    if msgspec is None and not _Said.fallback:
        _Said.fallback = True
        print("notice: msgspec is not installed: traces are read with the standard library's json (slower; "
              "`pip install msgspec`)", file=sys.stderr)  # fmt: skip


_EVENTS = msgspec.json.Decoder(list[Event]) if msgspec else None
_ARGS = msgspec.json.Decoder(Args) if msgspec else None
_LOOSE_ARGS = msgspec.json.Decoder(LooseArgs) if msgspec else None
_ARG = msgspec.json.Decoder(SCALAR | list[SCALAR]) if msgspec else None
GPU_ARGS_DECODER = msgspec.json.Decoder(GpuArgs) if msgspec else None
LAUNCH_ARGS_DECODER = msgspec.json.Decoder(LaunchArgs) if msgspec else None
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw]) if msgspec else None  # a run's elements, each left undecoded
_EVENT = msgspec.json.Decoder(Event) if msgspec else None
_LOOSE_EVENT = msgspec.json.Decoder(LooseEvent) if msgspec else None
_TEXT = msgspec.json.Decoder(str | None) if msgspec else None
_TIME = msgspec.json.Decoder(float) if msgspec else None
_SCALAR = msgspec.json.Decoder(SCALAR) if msgspec else None
_NUMBER_START = b"-0123456789"
# A run's elements where the others are empty arrays or scalars (the quick way to drop them; others: _ITEMS)
_MIXED = msgspec.json.Decoder(list[Event | tuple[()] | int | float | str | bool | None]) if msgspec else None
if msgspec is not None:  # the entries the reader keeps, undecoded; the others skipped unread
    Header = msgspec.defstruct("Header", [(k, msgspec.Raw, None) for k in HEADER_KEYS], gc=False)
    Tail = msgspec.defstruct("Tail", [(k, msgspec.Raw, None) for k in ("traceEvents", *HEADER_KEYS)], gc=False)
_HEADER = msgspec.json.Decoder(Header) if msgspec else None
_TAIL = msgspec.json.Decoder(Tail) if msgspec else None
_SPACE = rb"[ \t\n\r]*"
_NOT_SPACE = re.compile(rb"[^ \t\n\r]")
_CUT = re.compile(rb"\}" + _SPACE + rb"," + _SPACE + rb"\{")  # where one object may end and the next begin
_ANY_CUT = re.compile(rb'[]}"0-9elNy]' + _SPACE + rb",")  # where any value may end (an element not an object)
_CUTS = ((_CUT, 2), (_ANY_CUT, 1))  # each with how far back from its end the next element's separator is
_STUB = b'"":0}'  # closes the header where the "traceEvents" key starts (the key's bytes are longer)
_EVENTS_KEY = re.compile(rb'"traceEvents"' + _SPACE + rb":" + _SPACE + rb"\[")
_ODD = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]")  # what msgspec refuses and the standard library reads
_AT_BYTE = re.compile(r"\(byte (\d+)\)")
_BAD_ESCAPE = re.compile(r"invalid escape|Invalid \\escape")  # msgspec's and the standard library's words
_CUT_TRIES = 2  # how many of the last cuts of a block are tried
_TAIL_AFTER = 1 << 16  # how far from a block's end the last cuts are looked for first
_PREFIX = b'{"traceEvents": ['
_GZIP_MAGIC = b"\x1f\x8b"
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, which some editors put first
_TRUNCATED_TOKEN = 9  # the standard library's error this close to a block's end may be a token cut by it


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _time(value: object) -> float:
    """A ts or dur as a float; NaN (an unusable time, skipped) for a non-number or an int past a float's range."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except OverflowError:  # a 400-digit integer
        return math.nan


def _scalar(value: object) -> object:
    """A tid as msgspec types it: a number, text, bool or None; None for an array or object."""
    return None if isinstance(value, (list, dict)) else value


def _as_raw(value: object) -> object:
    """A RAW_FIELDS entry as msgspec would leave it (a Raw of its JSON), so the reader sees one kind; as it is
    without msgspec."""
    if msgspec is None or value is None:
        return value
    try:
        return msgspec.Raw(msgspec.json.encode(value))
    except (TypeError, ValueError):  # a lone surrogate in a string, a NaN: not an entry the reader can use
        return None


def as_events(items: Iterable[object]) -> list[Event]:
    """The `Event` of each object in `items` (decoded JSON: dicts, as the standard library gives them, NaN
    included), typed as msgspec would type them; the other items dropped."""
    return [
        Event(
            _text(item.get("ph")),
            _text(item.get("cat", "")),
            _text(item.get("name")),
            _time(item.get("ts")),
            _time(item.get("dur")),
            _scalar(item.get("tid")),
            _scalar(item.get("pid")),
            _stdlib_args(item.get("args")),
        )
        for item in items
        if isinstance(item, dict)
    ]


class _Blocks:
    """A trace file's bytes, read a block at a time into `buf`; `offset` is where `buf` starts in the file."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.buf, self.offset, self.eof = fh, bytearray(), 0, False

    def fill(self, size: int) -> bool:
        """Read until `buf` holds `size` bytes; False if the file ended first."""
        while len(self.buf) < size and not self.eof:
            block = self.fh.read(BLOCK_BYTES)
            self.eof = not block
            self.buf += block
        return len(self.buf) >= size

    def drop(self, count: int) -> None:
        """Forget the first `count` bytes of `buf`. Where events handed on are still held (their Raw args refer
        into `buf`, which then cannot be resized), the rest goes on in a copy, and theirs stays as it is."""
        try:
            del self.buf[:count]
        except BufferError:
            self.buf = self.buf[count:]
        self.offset += count


def _bound() -> str:
    return f"{MAX_EVENT_BYTES / (1 << 20):g} MiB (the reader's bound, MAX_EVENT_BYTES)"


def _skip_space(blocks: _Blocks, keep: int) -> None:
    """Read past the whitespace after the first `keep` bytes of `blocks.buf` (0 at the file's start; 1 before an
    element, the byte that stands for the `[` or `,` before it) without keeping it: `buf` then holds `keep`
    bytes, the next one not whitespace. Refuse a run of whitespace longer than MAX_EVENT_BYTES."""
    start = blocks.offset + keep
    while True:
        found = _NOT_SPACE.search(blocks.buf, keep)
        if found:
            if found.start() > keep:
                blocks.drop(found.start() - keep)
            return
        if len(blocks.buf) > keep:
            blocks.drop(len(blocks.buf) - keep)
        if blocks.offset + keep - start > MAX_EVENT_BYTES:
            raise ValueError(f"whitespace from byte {start} runs on for more than {_bound()}")
        if not blocks.fill(keep + 1):
            return


def _fallback(doc: bytes) -> object:
    """`doc` decoded by the standard library (lone surrogates kept); None if it is not JSON."""
    try:
        return json.loads(doc)
    except ValueError:
        return None


class _ArrayEndedError(Exception):
    """The events array closes before the cut that was tried: the rest of the file is its tail."""


def _file_error(exc: msgspec.DecodeError, shift: int) -> ValueError:
    """msgspec's message, its `(byte N)` made a place in the file (`shift` + N)."""
    return ValueError(_AT_BYTE.sub(lambda at: f"(byte {int(at.group(1)) + shift})", str(exc)))


def _stdlib_loads(doc: bytes, shift: int, whole: bool) -> object:
    """`doc` decoded by the standard library; None where it may only be cut short (`whole` False: more of the
    file follows), ValueError naming the byte (`shift` + its place in `doc`) where it is malformed."""
    try:
        return json.loads(doc)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and not whole:  # a whole array, then more: the events array ended in it
            raise _ArrayEndedError from None
        if not whole and (exc.msg.startswith("Unterminated string") or exc.pos >= len(exc.doc) - _TRUNCATED_TOKEN):
            return None
        at = shift + len(exc.doc[: exc.pos].encode("utf-8", "surrogatepass"))
        message = "trailing characters" if exc.msg == "Extra data" else exc.msg  # as msgspec words it
        raise ValueError(f"JSON is malformed: {message} (byte {at})") from None
    except UnicodeDecodeError as exc:  # a block may end inside a character
        if not whole and exc.start >= len(doc) - 4:
            return None
        raise ValueError(f"not UTF-8 (byte {shift + exc.start})") from None


def _stdlib_decode_run(view: memoryview, shift: int) -> list[Event] | None:
    """`_decode_run` without msgspec."""
    value = _stdlib_loads(bytes(view), shift, whole=False)
    return as_events(value) if isinstance(value, list) else None


def _decode_run(view: memoryview, shift: int) -> list[Event] | None:
    """The events of `view` (`[` + a run of elements + `]`, its byte N at `shift` + N in the file), or None if
    the run was cut inside an element. Raise _ArrayEndedError if the array closes inside it, ValueError if the
    JSON is malformed before the cut."""
    try:
        return _EVENTS.decode(view)
    except msgspec.ValidationError:  # an element is not an object, or a field not of its type: read loosely
        pass
    except msgspec.DecodeError as exc:
        return _undecodable(view, exc, shift)
    try:
        return _loose_events(view)
    except msgspec.DecodeError as exc:  # msgspec stopped at the element before it read the JSON's end
        return _undecodable(view, exc, shift)


def _loose_events(view: memoryview | msgspec.Raw) -> list[Event]:
    """The events of a JSON array msgspec reads, but not as a list of Event: each element left undecoded (a Raw,
    whatever it holds: nothing of it is built), the objects decoded one at a time, the other elements dropped;
    an object with a field not of its type read as the standard library reads it."""
    try:  # the elements that are not objects are empty arrays or scalars: dropped once decoded, a block's worth
        return [item for item in _MIXED.decode(view) if type(item) is Event]
    except msgspec.ValidationError:
        pass
    events = []
    for item in _ITEMS.decode(view):
        with memoryview(item) as first:
            if first[:1] != b"{":
                continue
        try:
            events.append(_EVENT.decode(item))
        except msgspec.ValidationError:
            events.append(_loose_event(item))
    return events


def _loose_event(item: msgspec.Raw) -> Event:
    """The Event of an object with a field not of the type Event gives it, each field read as `as_events` reads
    it, none built whole: a value of another type is None (NaN for a time), a number out of msgspec's range read
    as json reads it."""
    raw = _LOOSE_EVENT.decode(item)
    return Event(_text(_loose(raw.ph, _TEXT)), "" if raw.cat is None else _text(_loose(raw.cat, _TEXT)),
                 _text(_loose(raw.name, _TEXT)),
                 _time(_loose(raw.ts, _TIME)), _time(_loose(raw.dur, _TIME)), _loose(raw.tid, _SCALAR),
                 _loose(raw.pid, _SCALAR), raw.args)  # fmt: skip


def _loose(raw: msgspec.Raw | None, decoder: msgspec.json.Decoder) -> object:
    """`raw` decoded by `decoder`; where it is not of its type, None, or a number as json reads it (1e400)."""
    if raw is None:
        return None
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError:
        with memoryview(raw) as first:
            number = first[:1] and first[0] in _NUMBER_START
        return _fallback(bytes(raw)) if number else None


def _undecodable(view: memoryview, exc: msgspec.DecodeError, shift: int) -> list[Event] | None:
    """`_decode_run` where msgspec refused the JSON: None where it stopped at the cut (it fell inside an element),
    the events as the standard library reads them where it holds what only msgspec refuses (NaN), else
    _ArrayEndedError where the array closes before the cut, ValueError naming the byte where it is malformed."""
    doc = bytes(view)
    if not _ODD.search(doc):
        at = _AT_BYTE.search(str(exc))
        if not at or int(at.group(1)) >= len(doc) - 1:  # at the cut: it fell inside an element
            return None
        try:  # is it a whole array, up to the last `]` before the error, followed by more of the file?
            msgspec.json.decode(doc[: doc.rfind(b"]", 0, int(at.group(1))) + 1], type=msgspec.Raw)
        except msgspec.DecodeError:
            raise _file_error(exc, shift) from None
        raise _ArrayEndedError from None
    value = _fallback(doc)
    return as_events(value) if isinstance(value, list) else None


_decode_run_of = _decode_run if msgspec is not None else _stdlib_decode_run


def _header(blocks: _Blocks) -> tuple[dict, bytes] | None:
    """Read up to the `traceEvents` array: (the top-level entries before it, what closes the file once the
    array's rest follows `_PREFIX`); `blocks.buf` then starts with the array's `[`. None if there is none."""
    if blocks.fill(len(_BOM)) and blocks.buf.startswith(_BOM):
        blocks.drop(len(_BOM))
    _skip_space(blocks, keep=0)
    size = BLOCK_BYTES
    while True:
        more = blocks.fill(size)
        start = blocks.buf[:1]
        if start == b"[":  # the bare-array form of the format
            return {}, b"}"
        if start != b"{":
            raise ValueError(f"it starts with {bytes(blocks.buf[:20])!r}, not with '{{' or '['")
        found = None
        for key in _EVENTS_KEY.finditer(blocks.buf):  # the buffer is written to, not resized, while it is open
            header = _entries_before(blocks.buf, key.start())
            if header is not None:  # the key is at the top level, not in a string or a nested object
                found = header, key.end() - 1
                break
        if found is not None:
            del key  # the buffer is unlocked before it is resized
            blocks.drop(found[1])
            return found[0], b""
        _check_json(blocks.buf, blocks.offset, whole=not more)  # no array of events yet: is it JSON at all?
        if not more:
            return None
        if len(blocks.buf) > MAX_EVENT_BYTES:
            raise ValueError(f"no traceEvents array in its first {_bound()}")
        size = min(2 * len(blocks.buf), MAX_EVENT_BYTES + 1)


def _entries_before(buf: bytearray, at: int) -> dict | None:
    """The entries the reader keeps (HEADER_KEYS) of the object `buf` opens, where the "traceEvents" key at `at`
    is one of its own; None where it is not (the object does not close there). The object is closed in place (the
    key's first bytes made _STUB, then put back) and read with its other entries skipped unread."""
    if msgspec is None:
        return _kept(_fallback(bytes(buf[:at]) + _STUB))
    end = at + len(_STUB)
    kept, buf[at:end] = bytes(buf[at:end]), _STUB
    try:
        with memoryview(buf) as view:
            return _kept_entries(_HEADER.decode(view[:end]))
    except msgspec.DecodeError:
        if not _ODD.search(buf, 0, at):
            return None
        return _kept(_fallback(bytes(buf[:end])))  # read as the standard library reads it
    finally:
        buf[at:end] = kept


def _too_large(key: str) -> ValueError:
    return ValueError(f"its {key!r} entry takes more than {MAX_KEPT_BYTES >> 20} MiB (the reader's bound on an "
                      "entry it keeps, MAX_KEPT_BYTES)")  # fmt: skip


def _kept_entries(entries: Header | Tail) -> dict:
    """The entries the reader keeps of a Header or Tail (each a Raw, None where absent), decoded."""
    kept = {}
    for key in HEADER_KEYS:
        raw = getattr(entries, key)
        if raw is None:
            continue
        if len(raw) > MAX_KEPT_BYTES:
            raise _too_large(key)
        try:
            kept[key] = msgspec.json.decode(raw)
        except msgspec.DecodeError:  # a number out of msgspec's range: read as json reads it
            kept[key] = _fallback(bytes(raw))
    return kept


def _kept(value: object) -> dict | None:
    """The entries the reader keeps (HEADER_KEYS) of a top-level object the standard library decoded (the size of
    each that of its JSON as json.dumps writes it); None where it is not an object."""
    if not isinstance(value, dict):
        return None
    kept = {key: value[key] for key in HEADER_KEYS if key in value}
    for key, entry in kept.items():
        if len(json.dumps(entry)) > MAX_KEPT_BYTES:
            raise _too_large(key)
    return kept


def _check_json(doc: bytearray, shift: int, whole: bool) -> None:
    """Raise ValueError naming the byte (`shift` + its place in `doc`) where `doc`, the file's first bytes (all of
    them if `whole`), is not JSON; a value cut short by the end of `doc` is fine unless `whole`."""
    if msgspec is None:
        _stdlib_loads(bytes(doc), shift, whole)
        return
    try:
        msgspec.json.decode(doc, type=msgspec.Raw)
    except msgspec.DecodeError as exc:
        at = _AT_BYTE.search(str(exc))
        if whole or (at and int(at.group(1)) < len(doc) - 1 and not _ODD.search(doc)):
            raise _file_error(exc, shift) from None


def _whole_run(blocks: _Blocks, tried: int) -> tuple[list[Event], int] | None:
    """The events of the run of whole elements that follows the first byte of `blocks.buf` (the byte before an
    element: the array's `[` or a separator), ended at one of the last cuts of its first BLOCK_BYTES (of twice as
    many, and so on, where none of those ends a run: an element larger than a block), and how much of `buf` they
    used up (up to the byte before the next element); None if no such cut ends a run. However much `buf` holds (a
    header read whole, an element larger than the block), a run of small elements takes about a block. `tried`:
    how much of `buf` a call before searched in vain (0 if none), its cuts not tried again. The run is decoded in
    place, with no copy: the first byte is made `[` and the byte after the cut's value a `]` (put back if it was
    no cut)."""
    buf = blocks.buf
    buf[0] = ord("[")
    object_cut, limit = False, max(BLOCK_BYTES, 2 * tried)
    while True:
        limit = min(limit, len(buf))
        near_end = max(0, limit - _TAIL_AFTER)
        # Between objects; where there is no such cut near the window's end, after any value too (`[], [],`).
        near = _last(_CUT, buf, near_end, limit)
        for pattern, back in _CUTS if not near else _CUTS[:1]:
            cuts = near if pattern is _CUT else _last(pattern, buf, near_end, limit)
            if not cuts and near_end:
                cuts = _last(pattern, buf, 0, limit)
            object_cut = object_cut or (pattern is _CUT and bool(cuts))
            for close, end in reversed(cuts):
                kept, buf[close] = buf[close], ord("]")
                try:
                    with memoryview(buf) as view:  # released before `buf` is resized
                        events = _decode_run_of(view[: close + 1], blocks.offset)
                except _ArrayEndedError:  # the rest of the file is read as it is
                    buf[close] = kept
                    raise
                if events is not None:
                    return events, end - back
                buf[close] = kept
        if limit == len(buf):
            break
        limit *= 2
    if not object_cut:  # no place where an object may end: is the JSON broken before the block's end? (zeros)
        with memoryview(buf) as view:
            if _decode_run_of(view, blocks.offset) is not None:  # the events array ends at the block's end
                raise _ArrayEndedError
    return None


def _last(pattern: re.Pattern, buf: bytearray, start: int, end: int) -> list[tuple[int, int]]:
    """The last _CUT_TRIES matches of `pattern` in `buf[start:end]`, each (the byte after its first, its end):
    only those are kept, however many there are."""
    found = pattern.finditer(buf, start, end)
    return [(cut.start() + 1, cut.end()) for cut in collections.deque(found, _CUT_TRIES)]


def _tail(blocks: _Blocks, closing: bytes) -> tuple[list[Event], dict]:
    """The rest of the file: the last events and the top-level entries after the array."""
    if blocks.fill(MAX_EVENT_BYTES + 2):
        raise ValueError(f"the events from byte {blocks.offset + 1} to the end take more than {_bound()}")
    shift = blocks.offset + 1 - len(_PREFIX)
    doc = blocks.buf  # made the whole object in place: the byte before the first element becomes _PREFIX
    try:
        doc[:1] = _PREFIX
    except BufferError:  # events the caller keeps refer into it
        doc = bytearray(_PREFIX) + memoryview(doc)[1:]
    doc += closing
    if msgspec is None:
        value = _stdlib_loads(doc, shift, whole=True)
        return _stdlib_events(value.pop("traceEvents")), _kept(value)
    try:
        entries = _TAIL.decode(doc)
    except msgspec.DecodeError as exc:
        value = _fallback(doc) if _ODD.search(doc) else None
        if not isinstance(value, dict):
            raise _file_error(exc, shift) from None
        return _stdlib_events(value.pop("traceEvents")), _kept(value)
    try:
        events = _EVENTS.decode(entries.traceEvents)
    except msgspec.ValidationError:
        with memoryview(entries.traceEvents) as first:
            if first[:1] != b"[":
                raise ValueError("its traceEvents is not a list") from None
        events = _loose_events(entries.traceEvents)
    return events, _kept_entries(entries)


def _stdlib_events(events: object) -> list[Event]:
    if not isinstance(events, list):
        raise ValueError("its traceEvents is not a list")
    return as_events(events)


def _stream(fh: BinaryIO, on_events: Callable[[list[Event]], None]) -> dict | None:
    """Hand the events of the trace in `fh` to `on_events`, a block's run at a time; the other top-level entries,
    None if it has no events."""
    blocks = _Blocks(fh)
    found = _header(blocks)
    if found is None:
        return None
    header, closing = found
    size, tried = BLOCK_BYTES, 0
    try:
        while blocks.fill(size):
            _skip_space(blocks, keep=1)
            run = _whole_run(blocks, tried)
            if run is None:  # no whole element yet: wait for twice as much, up to the bound
                if len(blocks.buf) > MAX_EVENT_BYTES:
                    raise ValueError(f"the event from byte {blocks.offset + 1} is larger than {_bound()}")
                size, tried = min(2 * len(blocks.buf), MAX_EVENT_BYTES + 2), len(blocks.buf)
                continue
            events, end = run
            on_events(events)
            del events, run  # their Raw args refer into the buffer, which cannot be resized while they live
            blocks.drop(end)
            size, tried = BLOCK_BYTES, 0
    except _ArrayEndedError:
        pass
    events, rest = _tail(blocks, closing)
    on_events(events)
    return {**header, **rest}


class _NotAFileError(ValueError):
    """The path is a pipe, a device, a folder: not a file to read a trace from."""


@contextlib.contextmanager
def _open(path: Path) -> Iterator[BinaryIO]:
    """The file's bytes, gunzipped where they start with gzip's magic bytes (whatever the name: `.json.GZ`
    too). A named pipe or a device is refused unread: it is opened without waiting (O_NONBLOCK: opening a pipe
    would wait for a writer), and its kind checked before any read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, "rb") as raw:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _NotAFileError(f"not a regular file ({kind_of(mode)})")
        if hasattr(os, "O_NONBLOCK"):
            os.set_blocking(fd, True)
        if raw.peek(len(_GZIP_MAGIC))[: len(_GZIP_MAGIC)] != _GZIP_MAGIC:
            yield raw
            return
        with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
            yield unzipped


class UnescapedBackslashError(ValueError):
    """The JSON holds a backslash that starts no escape: read it again with `repair` (stream_json)."""


# A JSON escape (group 1), else a lone backslash: what Windows exports with Python stacks write for `torch\profiler`
# (pytorch#60187, #92988, kineto#336).
_ESCAPE = re.compile(rb'(\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))|\\')
_ESCAPE_BYTES = 6  # the longest escape: \uXXXX
BACKSLASH = ord("\\")
REPAIRED = "repaired backslashes"  # the entry of stream_json's answer that counts them, where it repaired any


class _Doubled:
    """A file's bytes with each lone backslash (one that starts no JSON escape) doubled, read as the file is: the
    last few bytes of a read, where an escape may go on in the next, wait for it."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh, self.held, self.count = fh, b"", 0

    def _double(self, found: re.Match) -> bytes:
        if found.group(1):
            return found.group(1)
        self.count += 1
        return b"\\\\"

    def read(self, size: int) -> bytes:
        while True:
            more = self.fh.read(size)
            data = self.held + more
            cut = len(data)
            at = data.rfind(b"\\", max(cut - _ESCAPE_BYTES, 0)) if more else -1  # at the end: nothing to wait for
            if at >= 0:  # an escape that starts in the last bytes may go on in the next read, unless it ends a pair
                before = 0  # the backslashes just before it: the run starts where no escape is open
                while before < at and data[at - 1 - before] == BACKSLASH:
                    before += 1
                cut = at if before % 2 == 0 else cut
            self.held = data[cut:]
            if cut or not more:
                return _ESCAPE.sub(self._double, data[:cut]) if b"\\" in data else data[:cut]


def stream_json(path: Path | str, on_events: Callable[[list[Event]], None], repair: bool = False) -> dict:
    """Read a Chrome trace (`.json` or `.json.gz`) without holding its events: call `on_events` with the
    `Event`s of the elements of `traceEvents`, a list at a time, in order, and return the other top-level entries
    ({} for the bare-array form). Raise ValueError naming the file if it is not a trace: UnescapedBackslashError
    where a backslash starts no escape, to be read again with `repair`, which doubles each such backslash as it
    reads (its answer's REPAIRED entry counts them)."""
    path = Path(path)
    say_fallback()
    try:
        with _open(path) as fh:
            doubled = _Doubled(fh) if repair else None
            header = _stream(doubled or fh, on_events)
    except _NotAFileError as exc:
        raise ValueError(f"{path}: {exc}") from None
    except RecursionError:
        raise ValueError(f"{path}: not a Chrome trace (JSON nested too deeply to read)") from None
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        error = UnescapedBackslashError if not repair and _BAD_ESCAPE.search(str(exc)) else ValueError
        raise error(f"{path}: not a readable Chrome trace ({exc})") from None
    if header is None:
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return {**header, REPAIRED: doubled.count} if doubled is not None and doubled.count else header
