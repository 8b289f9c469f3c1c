"""Counterfactuals for the verdict: ordinary training and inference loops, each with one known bottleneck, written
as users write them; each profiled as it is (the trace the verdict reads), then timed without the profiler before
and after the lever that removes its bottleneck is applied, 20 steps between CUDA events.

    python3 benchmarks/counterfactuals.py --out traces/counterfactuals        # every case (a CUDA GPU)
    python3 benchmarks/counterfactuals.py --only item_sync --steps 20

Writes <out>/<case>.json.gz (the profiled loop as users wrote it), <out>/<case>_lever.json.gz (the same loop with
the lever applied) and <out>/timings.json: per case, the median over --repeat timings of a step before, after the
lever and after a second lever ("other", not profiled), each the mean of --steps steps between two CUDA events, and
the spread. The verdict is judged on these: the lever it
names first should be the one that saves the most, and its predicted saving within 2x of the measured one
(docs/diagnosis.md). Needs torch and a CUDA GPU; nothing of the suite is imported, so what runs is what a user
runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

DEVICE = "cuda"


# --- the cases: each returns (setup, step) for the loop as written and for the loop with its lever ------------------


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)) for _ in range(layers)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def host_batch(lever: str) -> Callable[[], None]:
    """Each step makes its batch on the CPU (torch.randn, then .to(cuda) from pageable memory): the GPU waits for the
    host's randn and the copy. Lever: make the batch on the GPU. Other: pin the CPU batch, copy it non_blocking."""
    model = MLP(1024, 4096, 2).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), fused=True)

    def batch() -> torch.Tensor:
        if lever == "lever":
            return torch.randn(8192, 1024, device=DEVICE)
        if lever == "other":
            return torch.randn(8192, 1024).pin_memory().to(DEVICE, non_blocking=True)
        return torch.randn(8192, 1024).to(DEVICE)

    def step() -> None:
        x = batch()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


class Decoded(torch.utils.data.Dataset):
    """A dataset whose __getitem__ does CPU work per sample, as decoding and augmenting an image does."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, 64, 64, generator=g)
        for _ in range(4):  # the augmentation pipeline
            image = torch.flip(image, dims=[2]) * 0.9 + 0.05
        return image, torch.tensor(i % 10)


def dataloader(lever: str) -> Callable[[], None]:
    """A DataLoader without workers: each step waits for 256 samples made in the main process. Lever: num_workers=4
    and pin_memory=True. Other: pin_memory=True alone."""
    extra = {"num_workers": 4, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 4}
    extra = extra if lever == "lever" else {"pin_memory": True} if lever == "other" else {}
    lever = bool(extra)  # non_blocking copies from pinned memory
    loader = torch.utils.data.DataLoader(Decoded(), batch_size=256, shuffle=False, **extra)
    batches = iter(loader)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 64 * 64, 2048), nn.ReLU(), nn.Linear(2048, 10)).to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), fused=True)

    def step() -> None:
        x, y = next(batches)
        x, y = x.to(DEVICE, non_blocking=lever), y.to(DEVICE, non_blocking=lever)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def decode(lever: str) -> Callable[[], None]:
    """A decode loop at batch 1: 16 tokens a step through a 24-layer model of small matrices, each token a few
    hundred tiny kernels launched one by one. Lever: capture one token's forward in a CUDA graph and replay it.
    Other: torch.compile(model) (fused, fewer kernels, still launched one by one)."""
    model = MLP(512, 1024, 24).to(DEVICE, torch.bfloat16).eval()
    x = torch.randn(1, 512, device=DEVICE, dtype=torch.bfloat16)
    if lever == "other":
        model = torch.compile(model)
    if lever != "lever":

        @torch.no_grad()
        def step() -> None:
            h = x
            for _ in range(16):
                h = model(h)

        return step
    static_in = x.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static_in)

    def step() -> None:
        for _ in range(16):
            graph.replay()
            static_in.copy_(static_out)

    return step


def optimizer(lever: str) -> Callable[[], None]:
    """AdamW(foreach=False) over 200 parameters: each parameter's update is a dozen small kernels launched one by
    one, the step's largest part. Lever: AdamW(fused=True), one kernel over every parameter. Other: foreach=True."""
    model = MLP(256, 512, 50).to(DEVICE)
    kind = {"lever": {"fused": True}, "other": {"foreach": True}}.get(lever, {"foreach": False})
    opt = torch.optim.AdamW(model.parameters(), **kind)
    x = torch.randn(64, 256, device=DEVICE)

    def step() -> None:
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def item_sync(lever: str) -> Callable[[], None]:
    """A step that logs each layer's activation norm with .item(), as a debugging hook does: 16 syncs a step, each
    making the CPU wait until the GPU drains, then launch the next kernels into an idle GPU. Lever: keep the norms
    on the GPU (torch.stack them, read once, later). Other: torch.compile each layer (fewer launches; the syncs
    stay)."""
    model = MLP(1024, 1024, 16).to(DEVICE)
    if lever == "graph":
        return item_sync_graphed(model)
    if lever == "other":  # one graph per layer: each layer is a module of its own, compiled once
        for limit in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), 64))
    layers = [torch.compile(layer) for layer in model.layers] if lever == "other" else list(model.layers)
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(256, 1024, device=DEVICE)
    log: list = []

    def step() -> None:
        h, norms = x, []
        for layer in layers:
            h = h + layer(h)
            norm = h.detach().norm()
            norms.append(norm if lever == "lever" else norm.item())
        log.append(torch.stack(norms) if lever == "lever" else norms)
        loss = h.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def item_sync_graphed(model: nn.Module) -> Callable[[], None]:
    """item_sync's step as the verdict words its lever: the syncs taken out (the norms kept on the GPU), then the
    whole step (forward, backward, a capturable fused AdamW) captured once in a CUDA graph and replayed, as the
    CUDA-graphs recipe of PyTorch's docs does it; each replay's norms are copied out for the log."""
    opt = torch.optim.AdamW(model.parameters(), fused=True, capturable=True)
    x = torch.randn(256, 1024, device=DEVICE)
    log: list = []

    def body() -> torch.Tensor:
        h, norms = x, []
        for layer in model.layers:
            h = h + layer(h)
            norms.append(h.detach().norm())
        h.pow(2).mean().backward()
        opt.step()
        return torch.stack(norms)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream before the capture
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        norms = body()

    def step() -> None:
        graph.replay()
        log.append(norms.clone())

    return step


def compile_in_window(lever: str) -> Callable[[], None]:
    """torch.compile's first call inside the profiled steps: the window holds the compile. Lever: warm up (call the
    compiled step) before profiling; the steps are then those of the compiled model."""
    torch._dynamo.reset()
    model = torch.compile(MLP(1024, 4096, 4).to(DEVICE))
    x = torch.randn(4096, 1024, device=DEVICE)

    @torch.no_grad()
    def step() -> None:
        model(x)

    if lever:
        step()
        step()
    return step


# each case: (make(variant): variant "" is the loop as written, "lever" its lever, "other" a second lever that
# also helps, so the verdict's first lever is judged against the one that saves the most of those tried), the
# lever, the other lever (None: no second one)
CASES: dict[str, tuple[Callable[[str], Callable[[], None]], str, str | None]] = {
    "host_batch": (host_batch, "make the batch on the GPU", "pinned CPU batch, non_blocking copy"),
    "dataloader": (dataloader, "DataLoader(num_workers=4, pin_memory=True)", "pin_memory=True alone"),
    "decode": (decode, "CUDA graphs (capture a token's forward, replay it)", "torch.compile(model)"),
    "optimizer": (optimizer, "AdamW(fused=True)", "AdamW(foreach=True)"),
    "item_sync": (item_sync, "no .item() inside the step", "torch.compile each layer"),
    "compile_in_window": (compile_in_window, "warm up before profiling", None),
}
# a third variant, timed only: the lever as the verdict words it where that is more than the case's own lever
GRAPHED = {"item_sync": "no .item(), then the step as a CUDA graph"}


# --- profiling and timing ------------------------------------------------------------------------------------------


def profiled(step: Callable[[], None], path: Path, wait: int, active: int) -> None:
    """The loop as the posts write it, its trace gzipped to `path`."""
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "trace.json"
        with profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=wait, warmup=0 if wait == 0 else 1, active=active, repeat=1),
            record_shapes=True,
            on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
        ) as prof:
            for _ in range(wait + (0 if wait == 0 else 1) + active):
                with record_function("train_step"):
                    step()
                torch.cuda.synchronize()
                prof.step()
        with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)


def timed(step: Callable[[], None], steps: int) -> float:
    """Milliseconds a step, the mean of `steps` steps between two CUDA events (no profiler)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def run_case(name: str, out: Path, steps: int, repeat: int) -> dict:
    make, lever_text, other_text = CASES[name]
    result: dict = {"case": name, "lever": lever_text, "other_lever": other_text, "steps": steps}
    result["graph_lever"] = GRAPHED.get(name)
    for variant, key in (("", "before"), ("lever", "after"), ("other", "other"), ("graph", "graph")):
        if (variant == "other" and other_text is None) or (variant == "graph" and name not in GRAPHED):
            continue
        wait = 0 if name == "compile_in_window" and not variant else 1
        if variant in ("", "lever"):  # the traces the verdict reads: as written, and with its lever
            profiled(make(variant), out / f"{name}{'_lever' if variant else ''}.json.gz", wait=wait, active=3)
        if name == "compile_in_window" and not variant:
            # as written, the first of the timed steps compiles: a fresh compile per timing
            times = []
            for _ in range(repeat):
                step = make("")
                times.append(timed(step, steps))
        else:
            step = make(variant)
            for _ in range(3):
                step()
            times = [timed(step, steps) for _ in range(repeat)]
        result[key] = {"ms_per_step": statistics.median(times), "all": [round(t, 4) for t in times]}
    before = result["before"]["ms_per_step"]
    for key, saved in (("after", "saved"), ("other", "other_saved"), ("graph", "graph_saved")):
        if key in result:
            result[f"{saved}_ms"] = before - result[key]["ms_per_step"]
            result[f"{saved}_share"] = (before - result[key]["ms_per_step"]) / before
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("traces/counterfactuals"))
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), default=None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: the counterfactuals need a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "cases": [],
    }
    for name in args.only or list(CASES):
        began = time.monotonic()
        result = run_case(name, args.out, args.steps, args.repeat)
        results["cases"].append(result)
        before, after = result["before"]["ms_per_step"], result["after"]["ms_per_step"]
        share, took = 100 * result["saved_share"], time.monotonic() - began
        other = f"  other lever saved {100 * result['other_saved_share']:5.1f}%" if "other" in result else ""
        if "graph" in result:
            other += f"  graphed saved {100 * result['graph_saved_share']:5.1f}%"
        print(f"{name:18} before {before:9.3f} ms  after {after:9.3f} ms  saved {share:5.1f}%{other} ({took:.0f} s)")
    (args.out / "timings.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")  # the compile case compiles, as a first run does
    sys.exit(main())
