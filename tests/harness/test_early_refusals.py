"""What a machine cannot run is refused before the script imports torch (common.harness.early): the same line, exit
2."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import pytest
from helpers import ROOT, load_script, usage_error

from common.harness import early

# Run a script as `__main__` with these flags; print its exit code, its stderr line and whether torch was loaded.
AS_MAIN = (
    "import contextlib, io, json, runpy, sys\n"
    "script, *sys.argv[1:] = sys.argv[1:]\n"
    "err = io.StringIO()\n"
    "with contextlib.redirect_stderr(err):\n"
    "    try:\n"
    "        runpy.run_path(script, run_name='__main__')\n"
    "        code = 0\n"
    "    except SystemExit as exc:\n"
    "        code = exc.code\n"
    "print(json.dumps([code, err.getvalue().strip(), 'torch' in sys.modules]))\n"
)

REFUSED = [
    ("03_kernels_mlp", ["--device", "cpu"], "LigerGEGLUMLP is a Triton kernel and needs a CUDA GPU"),
    ("04_d_kernels_attention", ["--device", "cpu"], "FlashAttention needs a CUDA GPU"),
    ("05_training_step", ["--device", "cpu", "--cudagraphs"], "--cudagraphs needs a CUDA GPU"),
    ("04_a_naive_attention", ["--device", "cpu", "--seq", "65536"], "these shapes need about"),
    ("04_b_inplace_ops_attention", ["--device", "cpu", "--seq", "65536"], "these shapes need about"),
    ("01_matmul_add", ["--active", "2147483647"], "--active 2,147,483,647: about 17,180 GB of profiler events"),
    ("06_ddp_training_step", ["--active", "2147483647"], "--active 2,147,483,647: about"),
]


def as_main(script: str, *flags: str) -> tuple[int, str, bool]:
    """The exit code, stderr and whether torch loaded, of `script` run as `__main__`; it printed nothing on stdout."""
    done = subprocess.run(
        [sys.executable, "-c", AS_MAIN, str(ROOT / f"{script}.py"), *flags],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    *printed, last = done.stdout.splitlines()
    assert printed == []  # a refusal is its one error line: not even "importing torch ..."
    code, err, torch_loaded = json.loads(last)
    return code, err, torch_loaded


@pytest.mark.parametrize(("script", "flags", "said"), REFUSED, ids=[f"{s}-{f[-1]}" for s, f, _ in REFUSED])
def test_refusal_comes_before_torch_is_imported(script: str, flags: list[str], said: str) -> None:
    code, err, torch_loaded = as_main(script, *flags)
    assert (code, torch_loaded) == (2, False), err
    assert err.startswith(f"error: {said}") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("script", ["04_a_naive_attention", "04_b_inplace_ops_attention"])
def test_early_memory_line_is_the_one_after_torch(script: str, capsys: pytest.CaptureFixture) -> None:
    flags = ["--device", "cpu", "--seq", "65536"]
    after_torch = usage_error(lambda: load_script(script).main(flags), capsys)
    early_line = as_main(script, *flags)[1]
    # the free memory is read live by each process: it moves by a tenth of a GB between them on a busy machine
    free = re.compile(r"; [\d.,]+ GB free: ")
    assert free.search(early_line) and free.search(after_torch)
    assert free.sub("; N GB free: ", early_line) == free.sub("; N GB free: ", after_torch)


def test_help_and_unreadable_flags_are_left_to_the_parser() -> None:
    early.refuse_without_gpu("__main__", "needs a GPU", argv=["--device", "cpu", "--help"])
    early.refuse_attention_memory("__main__", 3, argv=["--device", "cpu", "--seq", "0"])
    early.refuse_attention_memory("__main__", 3, argv=["--device", "cpu", "--seq", "lots"])


def test_refusal_is_skipped_when_the_script_is_imported() -> None:
    early.refuse_without_gpu("not_main", "needs a GPU", argv=["--device", "cpu"])


def test_a_gpu_only_flag_refuses_only_when_given(capsys: pytest.CaptureFixture) -> None:
    early.refuse_without_gpu("__main__", "needs a GPU", flag="--cudagraphs", argv=["--device", "cpu"])
    assert (
        usage_error(
            lambda: early.refuse_without_gpu(
                "__main__", "needs a GPU", "--cudagraphs", ["--device", "cpu", "--cudagraphs"]
            ),
            capsys,
        )
        == "error: needs a GPU"
    )


def test_cuda_device_is_seen_in_the_driver_files(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert not early.cuda_device_seen(tmp_path, path="")
    (tmp_path / "proc/driver/nvidia/gpus/0000:01:00.0").mkdir(parents=True)
    assert early.cuda_device_seen(tmp_path, path="")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert not early.cuda_device_seen(tmp_path, path="")


def test_cuda_device_is_seen_from_a_device_node_or_nvidia_smi(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidiactl").touch()  # the control node is there without a GPU
    assert not early.cuda_device_seen(tmp_path, path="")
    (tmp_path / "bin").mkdir()
    smi = tmp_path / "bin/nvidia-smi"
    smi.touch(mode=0o755)
    assert early.cuda_device_seen(tmp_path, path=str(tmp_path / "bin"))
    (tmp_path / "dev/nvidia0").touch()
    assert early.cuda_device_seen(tmp_path, path="")


def test_importing_torch_is_said_only_by_a_script_run_as_main(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    early.importing_torch("__main__", argv=["--size", "64"])
    early.importing_torch("01_matmul_add", argv=[])  # imported by a test: silent
    early.importing_torch("__main__", argv=["--help"])  # argparse's page alone
    monkeypatch.setenv("RANK", "1")
    early.importing_torch("__main__", argv=[])  # torchrun's other ranks: rank 0 says it
    assert capsys.readouterr().out == early.IMPORTING_TORCH + "\n"


@pytest.mark.parametrize("script", sorted(p.stem for p in ROOT.glob("0*.py")))
def test_every_script_says_importing_torch_after_its_refusals_and_before_torch(script: str) -> None:
    body = ast.parse((ROOT / f"{script}.py").read_text()).body
    calls = [
        (i, node.value.func.id)
        for i, node in enumerate(body)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
    ]
    torch_at = next(i for i, n in enumerate(body) if isinstance(n, ast.Import) and n.names[0].name == "torch")
    said = [i for i, name in calls if name == "importing_torch"]
    refusals = [i for i, name in calls if name.startswith("refuse_")]
    assert len(said) == 1 and said[0] < torch_at
    assert all(i < said[0] for i in refusals)  # a refused run prints its error line alone


@pytest.mark.parametrize("flag", ["--seq", "--batch", "--heads", "--head_dim"])
def test_a_shape_flag_of_160_digits_is_left_to_the_scripts_parser(flag: str) -> None:
    assert early.refuse_attention_memory("__main__", 3, ["--device", "cpu", flag, "9" * 160]) is None


def test_a_schedule_whose_events_cannot_fit_says_how_many_steps_would() -> None:
    line = early.schedule_refusal(1, 2**31 - 1, have=10e9)
    assert line is not None and line.endswith(f"--active {int(9e9) // 8_000 - 1:,} fits") and len(line) <= 113


@pytest.mark.parametrize("active", [3, 20, 200, 20_000])
def test_the_posts_schedules_fit_in_a_gigabyte(active: int) -> None:
    assert early.schedule_refusal(1, active, have=1e9) is None


@pytest.mark.parametrize("script", sorted(p.stem for p in ROOT.glob("0*.py")))
def test_a_misspelt_flag_is_refused_before_torch_is_imported(script: str) -> None:
    code, err, torch_loaded = as_main(script, "--device", "cuda", "--siz", "64")  # cuda: past the GPU refusals
    assert (code, torch_loaded) == (2, False), err
    assert err == "error: unrecognized arguments: --siz 64 (see --help)"


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--active", "0"], "error: argument --active: expected a positive integer, got 0"),
        (["--device", "mps"], "error: unsupported --device 'mps'; use auto, cpu, cuda or cuda:N"),
        (["--device", "gpu0"], "error: unknown --device 'gpu0'; use auto, cpu, cuda or cuda:N"),
        (["--threads", "4096"], "error: --threads 4096: this process may run on"),
        (["--traces-dir", " "], "error: --traces-dir is empty"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_a_bad_value_is_refused_before_torch_with_the_line_after_it(flags: list[str], said: str, capsys) -> None:
    code, err, torch_loaded = as_main("01_matmul_add", *flags)
    assert (code, torch_loaded) == (2, False), err
    assert err.startswith(said)
    assert usage_error(lambda: load_script("01_matmul_add").main(flags), capsys) == err  # main's own, after torch


def test_help_is_printed_before_torch_is_imported() -> None:
    done = subprocess.run(
        [sys.executable, "-c", AS_MAIN, str(ROOT / "02_linear.py"), "--help"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    *page, last = done.stdout.splitlines()
    assert json.loads(last) == [0, "", False]
    assert any("--in_dim" in line for line in page)


def test_torch_s_import_ticks_until_setup_says_it_is_in(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    """The import of torch gets the progress line the later slow phases have, on a fake clock's short period."""
    import threading

    from common.harness import flags, ticker

    monkeypatch.delenv("RANK", raising=False)
    ticked = threading.Event()
    monkeypatch.setattr(early, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(early, "PROGRESS_EVERY_S", 3600.0)
    monkeypatch.setattr(ticker.Progress, "line", lambda self: (ticked.set(), f"... 10.0 s: {self.what}")[1])
    early.importing_torch("__main__", flags.make_parser(None), argv=["--device", "cpu"])
    assert ticked.wait(60)
    early.torch_imported()
    assert capsys.readouterr().out == f"{early.IMPORTING_TORCH}\n... 10.0 s: importing torch\n"
    assert early._TICKER == []
