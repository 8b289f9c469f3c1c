"""Correctness before speed: compare a variant's output with a higher-precision reference."""

from __future__ import annotations

import torch

from common.cli import SuiteError

# Tolerance per dtype, relative to the output's scale: max|diff| <= TOL * max(1, max|reference|).
TOLERANCE = {torch.bfloat16: 3e-2, torch.float16: 5e-3, torch.float32: 1e-4}


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a reference is computed in: fp32 for 16-bit runs, fp64 for fp32 runs."""
    return torch.float64 if dtype == torch.float32 else torch.float32


def compare(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> tuple[str | None, dict]:
    """Compare `actual` with `expected` within `dtype`'s tolerance: (None, the figures) when they match, printing
    one line saying how close it came; else (the one line saying how they differ, the figures), printing nothing.
    The figures: {"max_diff", "tolerance"} (None where the shapes differ)."""
    if actual.shape != expected.shape:
        said = f"{what}: output shape {tuple(actual.shape)} != reference {tuple(expected.shape)}"
        return said, {"max_diff": None, "tolerance": None}
    diff = (actual.double() - expected.double()).abs()
    scale = max(1.0, expected.double().abs().max().item())
    max_diff = diff.max().item() if diff.numel() else 0.0
    tol = TOLERANCE[dtype] * scale
    figures = {"max_diff": max_diff if max_diff == max_diff else None, "tolerance": tol}  # NaN: None in JSON
    if not max_diff <= tol:  # also catches NaN
        return f"{what}: output disagrees with the reference (max |diff| {max_diff:.3g} > tolerance {tol:.3g})", figures
    print(f"check: {what} matches the reference (max |diff| {max_diff:.2g}, tolerance {tol:.2g})")
    return None, figures


def check_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str) -> float:
    """Raise SuiteError unless `actual` matches `expected` within `dtype`'s tolerance; return max|diff|.

    Prints one line saying what was compared and how close it came.
    """
    said, figures = compare(actual, expected, dtype, what)
    if said:
        raise SuiteError(said)
    return figures["max_diff"]
