"""What each kind of trace event is: the categories the reader reads, the runtime calls it tells apart (launches,
graph launches, syncs, capture), and the kinds of CPU time it types each call-tree node as at build (compiling, the
DataLoader, the optimizer, a sync, a launch, another runtime call). Names only: no torch, no I/O.
"""

from __future__ import annotations

import re

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
# The kernel launch APIs PyTorch traces show (name prefixes): CUDA runtime and driver, cooperative, HIP.
KERNEL_LAUNCHES = (
    "cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cuLaunchKernel", "cuLaunchCooperativeKernel",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipHccModuleLaunchKernel", "hipLaunchCooperativeKernel", "hipExtLaunchMultiKernelMultiDevice",
)  # fmt: skip
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")  # one launch, many kernels
# Calls that put work on the GPU (a kernel, a graph, a copy, a set): a trace holding none of them and no GPU event is a
# CPU run, whatever set-up calls (cudaGetDeviceProperties, the profiler's own cudaDeviceSynchronize) it records.
GPU_WORK_CALLS = (*KERNEL_LAUNCHES, *GRAPH_LAUNCHES, "cudaMemcpy", "cudaMemset", "cuMemcpy", "cuMemset", "hipMemcpy",
                  "hipMemset")  # fmt: skip
# The launch APIs told apart (Step.launch_apis): a call counts under the longest of these its name starts with, so
# cudaLaunchKernelExC is a cudaLaunchKernel and cuLaunchKernelEx is not a cuLaunchKernel.
LAUNCH_APIS = tuple(sorted({*KERNEL_LAUNCHES, "cuLaunchKernelEx"}, key=len, reverse=True))
# Between these, on one thread, launches record into a CUDA (HIP) graph and run nothing: they are counted apart.
CAPTURE_BEGIN = ("cudaStreamBeginCapture", "hipStreamBeginCapture")  # _v10000, _ptsz, ToGraph: the same call
CAPTURE_END = ("cudaStreamEndCapture", "hipStreamEndCapture")
COMPILER_LABELS = ("## ", "Torch-Compiled Region")  # annotations torch.compile adds: not phases
# Runtime and driver calls that block the CPU until the GPU has caught up (a plain cudaMemcpy is synchronous).
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD",
    "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy",
    "hipMemcpyWithStream",  # ROCm's copy for .item() and .cpu(): it returns once the copy is done
})  # fmt: skip
# The CPU categories the call tree holds, in the order of their codes (CallTree's `kind` of a node).
CPU_KINDS = ("cpu_op", "user_annotation", "python_function", "cuda_runtime", "cuda_driver")
OP, LABEL, PYTHON, RUNTIME, DRIVER = range(len(CPU_KINDS))
# A device the reader does not model: its events' categories start with one of these (Kineto's MTIA activities:
# mtia_runtime, mtia_ccp_events, mtia_insight). Its work is never "no GPU work".
UNMODELLED_DEVICES = {"mtia": "MTIA"}

# The kinds of CPU time a node is typed as at build (CallTree's `role` of a node), in the order of their codes.
ROLES = ("op", "label", "python", "runtime call", "launch", "sync", "compiling", "DataLoader", "optimizer", "step")
R_OP, R_LABEL, R_PYTHON, R_RUNTIME, R_LAUNCH, R_SYNC, R_COMPILING, R_DATALOADER, R_OPTIMIZER, R_STEP = range(len(ROLES))
# Labels (record_function, python_function) of compiling: Dynamo, Inductor, autotuning, CUDA graph capture.
# Only what runs while compiling: not the compiled code running (output_code.py's __call__, "Torch-Compiled
# Region"), nor Dynamo's guard check every call ("TorchDynamo Cache Lookup"), nor torch/_compile.py's wrapper.
COMPILING = re.compile(
    r"dynamo_timed|compile_inner|call_user_compiler|convert_frame\.py\(\d+\): _compile|compile_fx|fx_codegen|"
    r"codegen_and_compile|[Aa]utotun|async_compile|[Cc]ompile[_ ]?[Tt]ime|CUDAGraph\w*\.(?:record|warmup)|"
    r"graph[_ ]capture|[Ii]nductor[_ ]?[Cc]ompil"
)
# Inductor's compile worker pool: its threads wait on their pipes all run long, compiling or not.
COMPILE_POOL = ("torch/_inductor/compile_worker", "_inductor/compile_worker")
DATALOADER = "enumerate(DataLoader)"  # the label torch's DataLoader iterator opens around each __next__
MULTIPROCESSING_LOADER = "_MultiProcessingDataLoaderIter"  # in that label's name: the workers are on already
OPTIMIZER = ("Optimizer.step", "Optimizer.zero_grad")  # torch's own labels: Optimizer.step#AdamW.step
STEP = re.compile(r"^ProfilerStep#(\d{1,18})$")  # a longer number is not a step the profiler wrote
CALL_KINDS = frozenset({"cuda_runtime", "cuda_driver"})


def role_of(kind: int, name: str) -> int:
    """The kind of CPU time a node of category code `kind` named `name` is (a code of ROLES)."""
    if kind >= RUNTIME:
        if name in SYNC_CALLS:
            return R_SYNC
        return R_LAUNCH if name.startswith(KERNEL_LAUNCHES + GRAPH_LAUNCHES) else R_RUNTIME
    if kind == OP:
        return R_OP
    if name.startswith(DATALOADER):
        return R_DATALOADER
    if name.startswith(OPTIMIZER):
        return R_OPTIMIZER
    if STEP.match(name):
        return R_STEP
    if COMPILING.search(name) and not name.startswith(COMPILE_POOL):
        return R_COMPILING
    return R_LABEL if kind == LABEL else R_PYTHON
