"""The suite's toolbox, in four wings above a small base; imports point down only (tests/test_layout.py):

workloads/   the models the numbered scripts profile
harness/     what a numbered script imports around its profiler loop
analysis/    what a trace says: figures, verdict, tables, the summary and the diff (no torch)
reader/      a Chrome trace read into steps, GPU work and launches (no torch)
cli, interrupts, files, units, physics   the base: one-line errors, signals, files, units, device physics

Each module's docstring says its one job; there are no re-exports (import from the modules).
"""
