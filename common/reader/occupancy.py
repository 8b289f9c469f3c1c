"""Theoretical occupancy of a kernel launch: the warps its SM can hold at once, over the most the SM holds.

What the CUDA occupancy calculator (and `cudaOccupancyMaxActiveBlocksPerMultiprocessor`) computes, from
the launch (threads per block, registers per thread, shared memory per block) and the device's limits a
trace's `deviceProperties` carry. Three limits, the smallest wins:
  - warps: the SM's warps (maxThreadsPerMultiprocessor / 32) over the block's warps, at most the SM's
    block limit (32 on sm_80 and sm_90, 16 on sm_75/86/87, 24 on sm_89);
  - registers: a warp's registers are rounded up to the allocation unit (256); each of the SM's 4
    partitions holds regsPerMultiprocessor / 4 of them, so it fits a whole number of warps;
  - shared memory: the block's bytes plus the 1 KB the hardware reserves per block (sm_80 and later),
    rounded up to 128 bytes, into sharedMemPerMultiprocessor.
Kineto's "est. achieved occupancy %" is 0 for launches CUPTI cannot estimate (cuLaunchKernelEx: cuDNN, cuBLAS's
nvjet); this fills that gap. None where it cannot be computed: an AMD GPU, an unknown architecture, a launch
without its figures.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BLOCKS_PER_SM = {(7, 0): 32, (7, 2): 32, (7, 5): 16, (8, 0): 32, (8, 6): 16, (8, 7): 16, (8, 9): 24,
                     (9, 0): 32, (10, 0): 32, (10, 3): 32, (12, 0): 32}  # fmt: skip
REGISTER_UNIT = 256  # registers are allocated to a warp in units of this many
PARTITIONS = 4  # an SM's register file is split between its 4 warp schedulers
SHARED_UNIT = 128  # shared memory is allocated to a block in units of this many bytes
MAX_REGISTERS = 255  # per thread
WARP = 32


@dataclass(frozen=True)
class SmLimits:
    """What one streaming multiprocessor holds at once, from a trace's deviceProperties."""

    threads: int  # maxThreadsPerMultiprocessor
    threads_per_block: int  # maxThreadsPerBlock
    registers: int  # regsPerMultiprocessor
    registers_per_block: int  # regsPerBlock
    shared_bytes: int  # sharedMemPerMultiprocessor
    max_blocks: int  # resident blocks, by architecture
    reserved_shared: int  # bytes the hardware keeps per block: 1 KB from sm_80 on

    @property
    def warps(self) -> int:
        return self.threads // WARP


def _int(props: dict, key: str) -> int | None:
    value = props.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def sm_limits(props: object) -> SmLimits | None:
    """The SM limits of an NVIDIA GPU's `deviceProperties` entry; None for another GPU or missing figures."""
    if not isinstance(props, dict) or props.get("warpSize") != WARP:
        return None
    name = props.get("name")
    if isinstance(name, str) and any(word in name for word in ("AMD", "Radeon", "Instinct")):
        return None
    major, minor = _int(props, "computeMajor"), props.get("computeMinor")
    minor = minor if isinstance(minor, int) and not isinstance(minor, bool) else None
    max_blocks = MAX_BLOCKS_PER_SM.get((major, minor))  # a list or dict there is no key: no limits, no TypeError
    keys = ("maxThreadsPerMultiprocessor", "maxThreadsPerBlock", "regsPerMultiprocessor", "regsPerBlock",
            "sharedMemPerMultiprocessor")  # fmt: skip
    values = [_int(props, key) for key in keys]
    if max_blocks is None or None in values:
        return None
    threads, per_block, regs, regs_per_block, shared = values
    return SmLimits(threads, per_block, regs, regs_per_block, shared, max_blocks, 1024 if major >= 8 else 0)


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def active_blocks(threads: int, registers: int, shared_bytes: int, sm: SmLimits) -> int:
    """How many blocks of this launch one SM holds at once (0: the block does not fit)."""
    if not 0 < threads <= sm.threads_per_block or not 0 <= registers <= MAX_REGISTERS or shared_bytes < 0:
        return 0
    warps = -(-threads // WARP)
    by_warps = min(sm.max_blocks, sm.warps // warps)
    per_warp = _round_up(registers * WARP, REGISTER_UNIT)
    if per_warp * _round_up(warps, PARTITIONS) > sm.registers_per_block:
        return 0
    by_registers = (sm.registers // PARTITIONS // per_warp) * PARTITIONS // warps if per_warp else by_warps
    block_shared = _round_up(shared_bytes + sm.reserved_shared, SHARED_UNIT)
    by_shared = sm.shared_bytes // block_shared if block_shared else by_warps
    return min(by_warps, by_registers, by_shared)


def theoretical_occupancy(threads: int, registers: int, shared_bytes: int, sm: SmLimits | None) -> float | None:
    """Percent of the SM's warps this launch keeps resident; None without the device's limits or if it cannot fit."""
    if sm is None:
        return None
    blocks = active_blocks(threads, registers, shared_bytes, sm)
    return 100.0 * blocks * -(-threads // WARP) / sm.warps if blocks else None
