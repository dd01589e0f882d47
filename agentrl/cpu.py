"""What this machine's CPU can do, read once: whether it multiplies bfloat16 natively.

What this is: `native_cpu_bf16`, which the engines and the update consult before running under bf16, and
`speed_flags` and `cpu_model`, which benchmarks and studies report beside their figures. What this is not:
a benchmark; the measured cost of emulated bf16 on an AVX2-only CPU is in docs/benchmarks.md.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch


@functools.cache
def native_cpu_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX-512 BF16, and oneDNN can use it). Without
    it, bf16 matmuls are emulated and far slower than fp32, so bf16 autocast must be skipped there, whatever
    the config asks."""
    flags = cpu_flags()
    native = bool(flags & {"amx_bf16", "avx512_bf16"}) if flags else False
    return (
        native and torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    )


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" where there is none)."""
    return cpuinfo_value("model name") or "unknown"


def cpu_flags() -> set[str]:
    """The flags line of /proc/cpuinfo (empty where there is none)."""
    return set(cpuinfo_value("flags").split())


def cpuinfo_value(key: str) -> str:
    """The value of the first /proc/cpuinfo line that starts with `key` ("" where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    line = next((line for line in text.splitlines() if line.startswith(key)), "")
    return line.partition(":")[2].strip()


SPEED_FLAGS = frozenset({"amx_bf16", "amx_tile", "avx512_bf16", "avx512f", "avx2"})


def speed_flags() -> list[str]:
    """The flags of this CPU that decide bf16 and matmul speed: what a benchmark names beside its figures."""
    return sorted(SPEED_FLAGS & cpu_flags())
