"""A toolbox the numbered scripts call: one job per module, no re-exports (import from the modules).

cli        the command-line contract: one `error:` line, exit codes, argument types (no torch)
runtime    the flags every script shares, and the run they resolve to (device, dtype, seed, schedule, tag)
profiling  the small tools the scripts' torch.profiler loop calls: activities, sync, warm-up
export     the on_trace_ready writer: <tag>.json (Chrome trace) and <tag>.txt (key_averages table)
checks     correctness against a higher-precision reference, before a trace is trusted
trace      the trace reader: profiler steps, kernels, launches, kernel families and short names (no torch)
guess      a script's written-down guess, checked against its trace
physics    FLOPs, minimum bytes, device peaks, achieved rates
report     what a run prints after profiling; bench: timing without the profiler
summary    `python -m common.summary`: the posts' tables from one or many traces (no torch)
hub        Hub kernels through `kernels`, offline-aware, with the PyPI and local fallbacks
mlp, attention   what the two model families share (inputs, references, physics)
"""
