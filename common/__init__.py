"""A toolbox the numbered scripts call: one job per module, no re-exports (import from the modules).

cli          the command-line contract: one `error:` line, exit codes, argument types (no torch)
interrupts   Ctrl-C, SIGTERM, SIGHUP: a clean exit at a safe point, a second signal ends at once (no torch)
runtime      the flags every script shares, and the run they resolve to (device, dtype, seed, schedule, tag);
             the CPU's fast dtype (bf16 only where it is native)
machine      what this machine is: native 16-bit CPU features, a container's memory, the CPU thread policy,
             the profiler warnings that are not true here
recording    the guard around a script's profiler block (`recording`) and its tail (`finish`)
loop         what the script's profiler loop handed torch, read back from the profile object: schedule, options, label
estimate     a CPU run's time from its work and measured rates, said before it starts; progress lines
export       writing <tag>.json (Chrome trace), <tag>.txt (key_averages table), the memory snapshot
files        files written whole, with the mode a plain write gives; paths as a reader types them (no torch)
memory       GPU memory over the profiled steps (torch.cuda allocator statistics)
checks       correctness against a higher-precision reference, before a trace is trusted
private_api  every private torch / huggingface_hub API and message text the suite relies on
trace_json   streaming a Chrome trace file's events (no torch)
trace        the trace model: profiler steps, the GPU work and launches in each (no torch)
naming       kernel families and short kernel names (no torch)
guess        a script's written-down guess, checked against its trace; guess lines about one phase (in_phase)
figures      one trace's figures per step: the summary's row, the diff's totals (no torch)
occupancy    a kernel's theoretical occupancy from its launch and the device's limits (no torch)
physics      FLOPs, minimum bytes, device peaks, achieved rates
units        times and sizes in the unit that fits
report       what a run prints after profiling; bench: timing without the profiler
share        how to open and share the traces: the Hub login found offline, the trace-util command (no torch)
tables       printed tables (per step, per kernel)
summary      `python -m common.summary`: the posts' tables from one or many traces (no torch)
diff         `python -m common.diff A B`: what changed between two traces (no torch)
hub          `get_kernel(...)` offline-aware with one-line failures; local kernel directories via `kernels`
matmul, mlp, attention   the model families: inputs, references, physics, and their kernels' adapters
block        the decoder block of the training step (05, 06): shapes, reference, physics, memory, saved activations
ddp          data-parallel training on one machine (06): torchrun's environment, the process group, buckets
"""
