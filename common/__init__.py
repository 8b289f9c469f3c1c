"""The shared harness behind the numbered scripts: flags, setup, profiling, export, checks.

A script needs only `from common import ...` of the names below.
"""

from common.checks import check_close, reference_dtype
from common.errors import SuiteError, cli
from common.flags import make_parser, positive_int
from common.profiling import Profiled, profile_steps
from common.report import report
from common.setup import Run, setup

__all__ = [
    "Profiled", "Run", "SuiteError", "check_close", "cli", "make_parser", "positive_int",
    "profile_steps", "reference_dtype", "report", "setup",
]
