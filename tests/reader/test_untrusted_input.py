"""A trace or a path from someone else's code is untrusted input: its text cannot drive the terminal, and no file
(a pipe, a device, a bomb of zeros or whitespace) can hang the reader or take the machine's memory."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, ROOT, command, docs_text, tiny_gpu_trace

from common import cli
from common.analysis.diff import main as diff_main
from common.analysis.summary import main as summary_main

EVIL = "e\x1b]0;PWNED\x07\x1b[2Jk"  # sets the window title, then clears the screen, when printed raw
EVIL_SHOWN = "e\\x1b]0;PWNED\\x07\\x1b[2Jk"
OTHER_CONTROLS = "\n\x9b\x7f\u202e"  # a C1 CSI, DEL, a right-to-left override, a line break
RAW = ("\x1b", "\x07", "\x9b", "\x7f", "\u202e")


def evil_trace(folder: Path, name: str = "t.json", kernel: str = EVIL + OTHER_CONTROLS) -> Path:
    """tiny_gpu_trace with its GEMM renamed `kernel` and a CPU op renamed after it too."""
    data = tiny_gpu_trace()
    for event in data["traceEvents"]:
        if event.get("name") == "void ampere_sgemm_64x64_nn<float>(int)":
            event["name"] = kernel
        if event.get("name") == "aten::add":
            event["name"] = "aten::" + kernel
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data))  # JSON writes the controls as \u001b escapes: a valid trace
    return path


def assert_escaped(text: str, markdown: bool = False) -> None:
    """No raw control character in `text`, and the kernel's name shown with its escapes (in a Markdown table
    a backslash is written `\\\\`, so that it shows as one)."""
    md = (lambda s: s.replace("\\", "\\\\")) if markdown else (lambda s: s)  # noqa: E731
    assert not any(c in text for c in RAW), [c for c in RAW if c in text]
    assert md(EVIL_SHOWN) in text
    assert md("\\n\\x9b\\x7f\\u202e") in text  # the other controls, each as its escape: a line break too


# Item 7: control characters are shown escaped, by every output


def test_the_summary_shows_a_kernels_control_characters_escaped(tmp_path, capsys):
    code, out, err = command(summary_main, capsys, evil_trace(tmp_path), "--top", "9")
    assert code == 0, err
    assert_escaped(out)


def test_markdown_summary_escapes_control_characters_and_pipes_cannot_break_a_row(tmp_path, capsys):
    path = evil_trace(tmp_path, kernel=EVIL + OTHER_CONTROLS + "|x`y|")
    code, out, err = command(summary_main, capsys, path, "--markdown", "--top", "9", "--wide")
    assert code == 0, err
    assert_escaped(out, markdown=True)
    row = next(line for line in out.splitlines() if "PWNED" in line and line.startswith("|"))
    header = next(line for line in out.splitlines() if line.startswith("| µs/step"))
    unescaped_pipes = [i for i, c in enumerate(row) if c == "|" and row[i - 1] != "\\"]
    assert len(unescaped_pipes) == header.count("|")  # the name's pipes do not add cells
    assert "\\|x\\`y\\|" in row


@pytest.mark.parametrize("markdown", [False, True], ids=["text", "markdown"])
def test_the_diff_shows_control_characters_escaped(tmp_path, capsys, markdown):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(tiny_gpu_trace()))
    b = evil_trace(tmp_path, "b.json")
    code, out, err = command(diff_main, capsys, a, b, *(["--markdown"] if markdown else []))
    assert code == 0, err
    assert_escaped(out, markdown)


def test_an_op_name_with_a_line_break_stays_on_its_line_in_the_explained_verdict(tmp_path, capsys):
    data = json.loads(gzip.decompress((FIXTURES / "01_matmul_add" / "64_bf16_cold_eager.json.gz").read_bytes()))
    for event in data["traceEvents"]:
        if event.get("name") == "aten::mm":  # the op the CPU starts in the longest gap: named in its evidence
            event["name"] = "void f\nQZXJ"
    (tmp_path / "t.json").write_text(json.dumps(data))
    code, out, err = command(summary_main, capsys, tmp_path / "t.json", "--explain", "--markdown")
    assert code == 0, err
    assert "void f\\nQZXJ ×1" in out  # found by tests/reader/test_fuzz_reader.py
    assert not any(line.startswith("QZXJ") for line in out.splitlines())


def test_a_device_name_with_a_line_break_stays_on_its_line_in_the_diffs_notes(tmp_path, capsys):
    a, b = tiny_gpu_trace(), tiny_gpu_trace()
    b["deviceProperties"][0]["name"] = "NVIDIA\nQZXJ"  # found by tests/reader/test_fuzz_reader.py
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    code, out, err = command(diff_main, capsys, tmp_path / "a.json", tmp_path / "b.json")
    assert code == 0, err
    assert "different devices (NVIDIA A100-SXM4-80GB vs NVIDIA\\nQZXJ)" in out
    assert not any(line.startswith("QZXJ") for line in out.splitlines())


def test_a_file_name_with_control_characters_is_shown_escaped_in_every_line(tmp_path, capsys):
    folder = tmp_path / "ev\x1b[2Jil"
    good = evil_trace(folder, "t\x1b]0;PWNED\x07.json", kernel="k")
    bad = folder / "not\x1ba trace.json"
    bad.write_text("[1, 2")
    missing = tmp_path / "gone\x1b[2J.json"
    code, out, err = command(summary_main, capsys, good, missing)
    assert code == 0 and "\x1b" not in out + err and "\x07" not in out + err
    assert "ev\\x1b[2Jil/t\\x1b]0;PWNED\\x07" in out  # the trace's name: its folder and file
    assert "gone\\x1b[2J.json" in err  # the notice for the missing path
    code, out, err = command(summary_main, capsys, bad)
    assert code == 2 and "\x1b" not in err and "not\\x1ba trace.json" in err and err.count("\n") == 1
    code, out, err = command(diff_main, capsys, good, missing)
    assert code == 2 and "\x1b" not in err and "gone\\x1b[2J.json" in err


def test_what_a_scripts_report_prints_goes_through_the_same_guard(capsys):
    @cli.cli
    def report(argv: list[str] | None = None) -> int:
        print(f"kernel {EVIL}")  # as a script's report prints the names of a trace's kernels
        print(f"warning: {EVIL}", file=sys.stderr)
        return 0

    assert report([]) == 0
    out, err = capsys.readouterr()
    assert out == f"kernel {EVIL_SHOWN}\n" and err == f"warning: {EVIL_SHOWN}\n"
    assert not isinstance(sys.stdout, cli.GuardedStream)  # given back when the command returns


# Item 10: a terminal whose encoding is not UTF-8

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""}


def ascii_run(*argv: object) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in C_LOCALE} | C_LOCALE
    env.pop("PYTHONIOENCODING")
    return subprocess.run([sys.executable, *map(str, argv)], cwd=ROOT, env=env, capture_output=True, timeout=300)


def test_on_an_ascii_terminal_the_summary_and_the_diff_print_ascii_stand_ins(tmp_path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(tiny_gpu_trace()))
    b = evil_trace(tmp_path, "b.json", kernel="void ampere_sgemm_128x64_nn<float>(int) µ")
    check = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdout.encoding)"], env={"LC_ALL": "C",
                           "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}, capture_output=True, text=True)  # fmt: skip
    assert check.stdout.strip().lower() in ("ascii", "ansi_x3.4-1968", "us-ascii")  # the case under test
    for argv in (["-m", "common.summary", a, b, "--top", "9"], ["-m", "common.diff", a, b],
                 ["-m", "common.summary", a, "--markdown"], ["-m", "common.summary", "--help"]):  # fmt: skip
        done = ascii_run(*argv)
        assert done.returncode == 0, done.stderr.decode()
        assert done.stderr == b"" and done.stdout.isascii(), argv
    summary, diff = ascii_run("-m", "common.summary", a, b).stdout.decode(), ascii_run("-m", "common.diff", a, b).stdout
    assert "us/step" in summary and "xbase" in summary  # µ -> u, × -> x
    assert b" -> " in diff and b"\\u2014" not in diff  # → -> ->, — -> -


@pytest.mark.slow
def test_on_an_ascii_terminal_a_scripts_report_prints_ascii_stand_ins(tmp_path):
    done = ascii_run("01_matmul_add.py", "--size", "8", "--device", "cpu", "--traces-dir", tmp_path)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()[-400:]
    assert done.stdout.isascii() and b"guess vs trace" in done.stdout and b" us" in done.stdout  # µs -> us


def test_on_an_ascii_terminal_an_error_naming_a_non_ascii_path_is_one_line(tmp_path):
    done = ascii_run("-m", "common.diff", tmp_path / "µ×.json", tmp_path / "b.json")
    assert done.returncode == 2 and done.stderr.count(b"\n") == 1 and b"Traceback" not in done.stderr
    assert b"\\udcc2\\udcb5\\udcc3\\udc97.json" in done.stderr  # the path's bytes, as Python keeps them


READ = "import sys\nfrom common.reader.build import read_trace\n{}"  # a fresh Python that reads a trace


# Item 9: a path that exists but is not a trace file is said to be what it is

FIFO_OR_DEVICES = ["fifo", "/dev/zero", "/dev/null", "/dev/urandom"]


def odd_path(tmp_path: Path, what: str, link: bool) -> Path:
    if what == "fifo":
        path = tmp_path / "pipe.json"
        os.mkfifo(path)  # opening it would wait for a writer that never comes
    else:
        path = Path(what)
    if link:
        (tmp_path / "link.json").symlink_to(path)
        path = tmp_path / "link.json"
    return path


@pytest.mark.parametrize("link", [False, True], ids=["direct", "through a link"])
@pytest.mark.parametrize("what", FIFO_OR_DEVICES)
def test_a_pipe_or_a_device_given_to_the_summary_is_said_to_be_not_a_regular_file(tmp_path, capsys, what, link):
    path = odd_path(tmp_path, what, link)
    code, out, err = command(summary_main, capsys, path)  # the test would hang here if the pipe were opened
    kind = "a named pipe" if what == "fifo" else "a character device"
    assert code == 2 and f"notice: {path}: not a regular file ({kind}" in err
    assert "no such file" not in err


@pytest.mark.parametrize("link", [False, True], ids=["direct", "through a link"])
@pytest.mark.parametrize("what", FIFO_OR_DEVICES)
def test_a_pipe_or_a_device_given_to_the_diff_is_said_to_be_not_a_regular_file(tmp_path, capsys, what, link):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(tiny_gpu_trace()))
    path = odd_path(tmp_path, what, link)
    code, out, err = command(diff_main, capsys, good, path)
    kind = "a named pipe" if what == "fifo" else "a character device"
    assert (code, out) == (2, "") and err.startswith(f"error: {path}: not a regular file ({kind}")
    assert err.count("\n") == 1


def test_a_folder_given_to_the_diff_is_said_to_be_a_folder(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(tiny_gpu_trace()))
    code, out, err = command(diff_main, capsys, good, tmp_path)
    assert (code, err) == (2, f"error: {tmp_path}: a folder, where a trace file was wanted\n")


def test_the_reader_refuses_a_pipe_without_waiting_for_a_writer(tmp_path):
    path = odd_path(tmp_path, "fifo", link=True)
    code = READ.format("try:\n    read_trace(sys.argv[1])\nexcept ValueError as e:\n    print(e)")
    done = subprocess.run([sys.executable, "-c", code, path], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout == f"{path}: not a regular file (a named pipe)\n"  # no writer ever comes: opened, it hangs


# Item 12: a gzip by its magic bytes, a UTF-8 byte order mark

MSGSPEC_OR_NOT = pytest.mark.parametrize("msgspec", [True, False], ids=["msgspec", "standard library"])
STEPS = "print([len(s.kernels) for s in read_trace(sys.argv[1]).steps])"


def steps_read(path: Path, msgspec: bool) -> str:
    """The kernels per step the reader finds in `path`, in a fresh Python with or without msgspec."""
    code = READ.format(STEPS if msgspec else 'sys.modules["msgspec"] = None\n' + STEPS)
    done = subprocess.run([sys.executable, "-c", code, path], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@MSGSPEC_OR_NOT
@pytest.mark.parametrize("name", ["trace.json.GZ", "trace.json"])
def test_a_gzipped_trace_is_unzipped_by_its_magic_bytes_whatever_its_name(tmp_path, msgspec, name):
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(tiny_gpu_trace()).encode()))
    assert steps_read(path, msgspec) == "[2, 1]"


@MSGSPEC_OR_NOT
@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
def test_a_utf8_byte_order_mark_before_the_trace_is_read_past(tmp_path, msgspec, gz):
    data = b"\xef\xbb\xbf" + json.dumps(tiny_gpu_trace()).encode()
    path = tmp_path / ("bom.json.gz" if gz else "bom.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    assert steps_read(path, msgspec) == "[2, 1]"


# Item 8: memory bounded whatever the file holds. Each file is generated here, a block at a time (never held);
# the bound and the block are made small, so "a few blocks" is a count of bytes held, not a time.

BLOCK = 4096
BOUND = 64 * BLOCK  # the MAX_EVENT_BYTES of these tests: 256 KiB
PREFIX = b'{"traceEvents": ['


@pytest.fixture(params=["msgspec", "standard library"])
def reader(request, monkeypatch):
    """common.reader.trace_json with a small block and bound, with msgspec or without it (its decoder put away), and
    the most bytes its buffer ever held: `reader.held[0]`."""
    from common.reader import trace_json

    monkeypatch.setattr(trace_json, "BLOCK_BYTES", BLOCK)
    monkeypatch.setattr(trace_json, "MAX_EVENT_BYTES", BOUND)
    if request.param != "msgspec":
        monkeypatch.setattr(trace_json, "msgspec", None)
        monkeypatch.setattr(trace_json, "_decode_run_of", trace_json._stdlib_decode_run)
    held = [0]
    fill = trace_json._Blocks.fill

    def counted_fill(self, size: int) -> bool:
        more = fill(self, size)
        held[0] = max(held[0], len(self.buf))
        return more

    monkeypatch.setattr(trace_json._Blocks, "fill", counted_fill)
    trace_json.held = held
    return trace_json


def generated(path: Path, head: bytes, fill: bytes, size: int, tail: bytes = b"", gz: bool = False) -> Path:
    """`head` + `size` bytes of `fill` + `tail`, written a block at a time (gzipped with `gz`)."""
    with gzip.open(path, "wb") if gz else open(path, "wb") as out:
        out.write(head)
        chunk = fill * (BLOCK // len(fill))
        for _ in range(size // len(chunk)):
            out.write(chunk)
        out.write(tail)
    return path


def refused(reader, path: Path) -> str:
    with pytest.raises(ValueError) as exc:
        reader.stream_json(path, lambda events: None)
    message = str(exc.value)
    assert message.startswith(f"{path}: not a readable Chrome trace (")
    return message


def test_zeros_after_the_events_array_opens_are_refused_after_one_block(tmp_path, reader):
    path = generated(tmp_path / "zeros.json", PREFIX, b"0", 100 * BOUND)  # 25 MiB of zeros
    message = refused(reader, path)
    assert "JSON is malformed" in message and f"(byte {len(PREFIX) + 1})" in message
    assert reader.held[0] <= 2 * BLOCK  # the first block: it is broken there


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip bomb"])
def test_a_run_of_whitespace_longer_than_the_bound_is_refused_naming_where_it_starts(tmp_path, reader, gz):
    path = generated(tmp_path / "spaces.json", PREFIX, b" \n\t\r", 100 * BOUND, b"]}", gz=gz)
    message = refused(reader, path)
    assert f"whitespace from byte {len(PREFIX)} runs on for more than 0.25 MiB (the reader's bound" in message
    assert reader.held[0] <= 2 * BLOCK  # whitespace is read past, not kept


def test_whitespace_before_the_json_is_read_past_and_bounded_too(tmp_path, reader):
    path = generated(tmp_path / "lead.json", b"", b"\n", 100 * BOUND, json.dumps(tiny_gpu_trace()).encode())
    message = refused(reader, path)
    assert "whitespace from byte 0 runs on for more than" in message and reader.held[0] <= 2 * BLOCK


def test_whitespace_within_the_bound_is_read_without_being_held(tmp_path, reader):
    events = json.dumps(tiny_gpu_trace()["traceEvents"])[1:-1].encode()
    path = generated(tmp_path / "roomy.json", PREFIX, b" ", BOUND // 2, events + b"]}")  # 32 blocks of spaces
    seen = []
    assert reader.stream_json(path, seen.extend) == {}
    assert len(seen) == len(tiny_gpu_trace()["traceEvents"]) and reader.held[0] <= 2 * BLOCK


@pytest.mark.parametrize("where", ["event", "header", "tail"])
def test_one_value_larger_than_the_bound_is_refused_naming_where_it_starts(tmp_path, reader, where):
    one = json.dumps(tiny_gpu_trace()["traceEvents"][1]).encode()
    if where == "event":  # an event whose name runs on past the bound
        path = generated(tmp_path / "e.json", PREFIX + one + b', {"name": "', b"x", 2 * BOUND, b'"}]}')
        expected = f"the event from byte {len(PREFIX + one) + 2} is larger than 0.25 MiB"  # its `{`
    elif where == "header":  # an entry before the events
        path = generated(tmp_path / "h.json", b'{"note": "', b"x", 2 * BOUND, b'", "traceEvents": []}')
        expected = "no traceEvents array in its first 0.25 MiB"
    else:  # an entry after the events
        path = generated(tmp_path / "t.json", PREFIX + one + b'], "note": "', b"x", 2 * BOUND, b'"}')
        expected = f"the events from byte {len(PREFIX)} to the end take more than 0.25 MiB"
    assert expected in refused(reader, path)
    assert reader.held[0] <= BOUND + 2 * BLOCK


@pytest.mark.parametrize("main", [summary_main, diff_main], ids=["summary", "diff"])
def test_the_bound_is_stated_in_the_help_and_the_readme(capsys, main):
    from common.reader import trace_json

    bound = f"{trace_json.MAX_EVENT_BYTES >> 20} MiB"
    code, out, _ = command(main, capsys, "--help")
    assert code == 0 and bound in out.replace("\n", " ")
    assert bound in docs_text()
