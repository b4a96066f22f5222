"""Where a preset runs, and whether it fits there: device, dtype and a memory check before loading.

More, with its measurements: docs/modules.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from demo.models import zerogpu

OVERHEAD = 1.2  # bytes needed per byte of weights
ZEROGPU_BYTES = 48 * 10**9  # ZeroGPU's default `large` size: half an RTX Pro 6000 Blackwell, 48 GB (hub docs)


class NotEnoughMemory(RuntimeError):
    """The preset does not fit in the memory that is free; the message gives need and free."""


@dataclass(frozen=True)
class Memory:
    """Free memory on this machine, in bytes."""

    gpus: tuple[int, ...]  # free bytes on each CUDA device, in index order; () without CUDA
    cpu: int  # RAM available to this process
    bf16: bool = True  # the GPUs compute in bfloat16


@dataclass(frozen=True)
class Plan:
    """Where and how a preset is loaded."""

    device: torch.device  # inputs, drafters, and the target unless spread
    dtype: torch.dtype
    spread: bool  # the target is spread over several GPUs with device_map="auto"
    max_memory: dict[int, int] | None  # per-GPU byte budget for the target's weights when spread
    need: int  # bytes the preset needs
    free: int  # bytes free where it goes (summed over the GPUs when spread)

    @property
    def summary(self) -> str:
        where = f"{len(self.max_memory)} GPUs" if self.spread else str(self.device)
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{where}, {dtype}, needs {gib(self.need)} of {gib(self.free)} free"


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def bytes_per_param(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def plan(target_params: int, drafter_params: int, memory: Memory, what: str = "this preset") -> Plan:
    """Choose device and dtype for a target and its largest drafter, or raise NotEnoughMemory."""
    if not memory.gpus:
        dtype = torch.float32
        need = int((target_params + drafter_params) * bytes_per_param(dtype) * OVERHEAD)
        if need > memory.cpu:
            raise NotEnoughMemory(
                f"{what} needs about {gib(need)} of RAM in float32 on CPU, but only {gib(memory.cpu)} is available"
            )
        return Plan(torch.device("cpu"), dtype, False, None, need, memory.cpu)

    dtype = torch.bfloat16 if memory.bf16 else torch.float16
    size = bytes_per_param(dtype)
    target_need = int(target_params * size * OVERHEAD)
    drafter_need = int(drafter_params * size * OVERHEAD)
    need = target_need + drafter_need
    first, total = memory.gpus[0], sum(memory.gpus)
    if need <= first:
        return Plan(torch.device("cuda:0"), dtype, False, None, need, first)
    if len(memory.gpus) > 1 and need <= total:
        # accelerate budgets weights only: scale each GPU's free bytes down by OVERHEAD, and keep
        # the drafters' room on the first GPU.
        budget = {i: int(free / OVERHEAD) for i, free in enumerate(memory.gpus)}
        budget[0] = max(0, int((first - drafter_need) / OVERHEAD))
        return Plan(torch.device("cuda:0"), dtype, True, budget, need, total)
    dtype_name = str(dtype).removeprefix("torch.")
    across = f", and {gib(total)} across all {len(memory.gpus)} GPUs" if len(memory.gpus) > 1 else ""
    raise NotEnoughMemory(
        f"{what} needs about {gib(need)} of GPU memory in {dtype_name}, but only {gib(first)} is free on cuda:0{across}"
    )


def load_kwargs(plan: Plan, *, drafter: bool = False) -> dict:
    """`from_pretrained` arguments that put a model where the plan says (drafters never spread)."""
    kwargs = {"dtype": plan.dtype}
    if plan.device.type == "cuda" and zerogpu.zero_gpu() and not plan.spread:
        return kwargs  # placed with .to("cuda") under ZeroGPU's CUDA emulation, as its docs show
    if plan.device.type == "cuda":
        if plan.spread and not drafter:
            kwargs.update(device_map="auto", max_memory=dict(plan.max_memory))
        else:
            kwargs["device_map"] = str(plan.device)
    return kwargs


def available_ram() -> int:
    """Bytes of RAM this process may still use: MemAvailable, capped by a cgroup limit if any."""
    available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    limit, usage = Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")
    if limit.exists() and usage.exists() and limit.read_text().strip() != "max":
        available = min(available, int(limit.read_text()) - int(usage.read_text()))
    return available


def probe() -> Memory:
    """This machine's free memory right now. On ZeroGPU, outside a decorated call there is only
    PyTorch's CUDA emulation, which knows no free memory: the documented size of the GPU a call
    gets is used instead."""
    if zerogpu.zero_gpu():
        return Memory((ZEROGPU_BYTES,), available_ram(), True)
    if not torch.cuda.is_available():
        return Memory((), available_ram())
    gpus = tuple(torch.cuda.mem_get_info(i)[0] for i in range(torch.cuda.device_count()))
    return Memory(gpus, available_ram(), torch.cuda.is_bf16_supported())


def synchronize() -> None:
    """Wait for every GPU to finish its queued work (before reading a clock)."""
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        torch.cuda.synchronize(i)
