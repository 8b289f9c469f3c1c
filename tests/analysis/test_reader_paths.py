"""The summary's notices on odd paths: escaped, and a folder it cannot search skipped (torch-free)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from common.analysis.summary import main as summary_main

FOREIGN = Path(__file__).resolve().parents[1] / "fixtures" / "foreign"  # tests/fixtures/foreign


def _run(capsys, *argv):
    try:
        code = summary_main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_newline_in_a_path_cannot_forge_a_notice_line(tmp_path, capsys):
    shutil.copy(FOREIGN / "side_stream.json.gz", tmp_path / "ok.json.gz")
    code, _, err = _run(capsys, tmp_path, tmp_path / "no_such\nnotice: everything is fine.json")
    assert code == 0
    assert [line for line in err.splitlines() if line.startswith("notice: everything")] == []
    assert "no_such\\nnotice: everything is fine.json" in err


def test_a_subfolder_that_cannot_be_searched_is_skipped_with_a_notice(tmp_path, capsys, monkeypatch):
    shutil.copy(FOREIGN / "side_stream.json.gz", tmp_path / "ok.json.gz")
    (tmp_path / "sub").mkdir()
    shutil.copy(FOREIGN / "bare_profile.json.gz", tmp_path / "sub" / "b.json.gz")
    real = os.scandir

    def denied(path):  # as a folder of mode 644 does for a user other than root
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr("common.analysis.summary.os.scandir", denied)
    code, out, err = _run(capsys, tmp_path)
    assert code == 0 and "side_stream" not in err
    assert "sub: a folder that cannot be read (Permission denied), skipped" in err
