"""What a numbered script imports around its profiler loop: flags and run, the guard, the export, the guess
checked against the trace, the report, the CPU estimate, the Hub kernels.
"""
