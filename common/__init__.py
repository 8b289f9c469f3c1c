"""The shared harness behind the numbered scripts: flags, setup, profiling, export, checks, guesses.

A script needs only `from common import ...` of the names below.
"""

from common.checks import check_close, check_output, reference_dtype
from common.errors import SuiteError, cli
from common.flags import make_parser, positive_int
from common.physics import Work
from common.predict import Expect, cpu_op, kernels, launches, memcpy, memset
from common.profiling import Profiled, profile_steps
from common.report import report
from common.setup import Run, setup

__all__ = [
    "Expect", "Profiled", "Run", "SuiteError", "Work", "check_close", "check_output", "cli", "cpu_op", "kernels", "launches",
    "make_parser", "memcpy", "memset", "positive_int", "profile_steps", "reference_dtype", "report", "setup",
]
