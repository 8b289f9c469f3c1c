"""The shared harness behind the numbered scripts: flags, setup, profiling, export, checks, guesses.

A script needs only `from common import ...` of the names below. They are imported on first
use, so `python -m common.summary` (which reads JSON only) starts without importing torch.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "check_close": "common.checks", "check_output": "common.checks", "reference_dtype": "common.checks",
    "SuiteError": "common.errors", "cli": "common.errors",
    "make_parser": "common.flags", "positive_int": "common.flags",
    "Work": "common.physics",
    "Expect": "common.predict", "cpu_op": "common.predict", "kernels": "common.predict",
    "launches": "common.predict", "memcpy": "common.predict", "memset": "common.predict",
    "Profiled": "common.profiling", "profile_steps": "common.profiling",
    "report": "common.reporting",
    "Run": "common.runtime", "setup": "common.runtime",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'common' has no attribute {name!r}") from None
    return getattr(importlib.import_module(module), name)
