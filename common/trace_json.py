"""Chrome trace files as JSON: stream the `traceEvents` of a `.json` or `.json.gz` one at a time, or load one whole."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

CHUNK_CHARS = 1 << 20  # the streaming reader reads this much at a time


class _JsonStream:
    """Top-level JSON read piece by piece from a text file: a value at a time, each decoded by the C scanner,
    so a trace's events are seen one by one and never held all at once."""

    _SPACE = re.compile(r"[ \t\n\r]*")

    def __init__(self, fh: TextIO) -> None:
        self.fh, self.buf, self.pos, self.eof = fh, "", 0, False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        chunk = "" if self.eof else self.fh.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[self.pos :] + chunk, 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self.pos = self._SPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos : self.pos + 1]

    def take(self, char: str) -> None:
        if self.peek() != char:
            found = self.buf[self.pos : self.pos + 20] or "the end of the file"
            raise ValueError(f"expected {char!r} but found {found!r}")
        self.pos += 1

    def value(self) -> object:
        self.peek()
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError:
                if self._more():  # the value may run on into the next chunk
                    continue
                raise
            if end == len(self.buf) and self._more():  # a number cut at the chunk's end: read on, decode again
                continue
            self.pos = end
            return value

    def items(self) -> Iterator[object]:
        """The elements of the array that starts here, one at a time."""
        self.take("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self.peek() == "]":
                self.pos += 1
                return
            self.take(",")


def stream_json(path: Path | str, on_event: Callable[[object], None]) -> dict:
    """Read a Chrome trace (`.json` or `.json.gz`) without holding its events: call `on_event` for each
    element of `traceEvents` and return the other top-level entries. Raise ValueError naming the file if it
    is not a trace."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            stream = _JsonStream(fh)
            if stream.peek() == "[":  # the bare-array form of the format
                for event in stream.items():
                    on_event(event)
                return {}
            header, seen_events = {}, False
            stream.take("{")
            while stream.peek() != "}":
                key = stream.value()
                if not isinstance(key, str):
                    raise ValueError("an object key is not a string")
                stream.take(":")
                if key == "traceEvents" and stream.peek() == "[":
                    seen_events = True
                    for event in stream.items():
                        on_event(event)
                else:
                    header[key] = stream.value()
                if stream.peek() != "}":
                    stream.take(",")
    except RecursionError:
        raise ValueError(f"{path}: not a Chrome trace (JSON nested too deeply to read)") from None
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable Chrome trace ({exc})") from None
    if not seen_events:
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return header


def load_json(path: Path | str) -> dict:
    """A whole Chrome trace as one dict (`.json` or `.json.gz`); ValueError naming the file if it is not one."""
    events: list[object] = []
    header = stream_json(path, events.append)
    return {**header, "traceEvents": events}
