"""The GPUs this worker has, read once from `nvidia-smi` at start, and the CPUs it may run on.

One query gives each GPU's name, memory and compute capability; what the engine is sized and
configured by (`MAX_NUM_SEQS`, the KV-cache dtype) and what the engine facts report comes from
that one reading. No `nvidia-smi` (a laptop, vLLM's CPU build) reads as no GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

QUERY = "name,memory.total,compute_cap"


def host_cores() -> int:
    """The CPUs this process may run on (a container's cpuset, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_mib: int
    capability: float | None


@dataclass(frozen=True)
class GpuFacts:
    gpus: tuple[Gpu, ...] = ()

    @classmethod
    def probe(cls) -> GpuFacts:
        smi = shutil.which("nvidia-smi")
        if not smi:
            return cls()
        try:
            out = subprocess.run(
                [smi, f"--query-gpu={QUERY}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return cls()
        return cls.parse(out)

    @classmethod
    def parse(cls, csv: str) -> GpuFacts:
        """`nvidia-smi --query-gpu=name,memory.total,compute_cap --format=csv,noheader` output:
        `NVIDIA H200, 143771 MiB, 9.0` a line; lines it cannot read are left out."""
        gpus = []
        for line in csv.splitlines():
            parts = [p.strip() for p in line.rsplit(",", 2)]
            if len(parts) != 3:
                continue
            name, memory, cap = parts
            try:
                mib = int(memory.split()[0])
            except (ValueError, IndexError):
                continue
            try:
                capability: float | None = float(cap)
            except ValueError:
                capability = None
            gpus.append(Gpu(name, mib, capability))
        return cls(tuple(gpus))

    @property
    def present(self) -> bool:
        return bool(self.gpus)

    @property
    def capability(self) -> float | None:
        """The first GPU's compute capability (9.0 for Hopper)."""
        return self.gpus[0].capability if self.gpus else None

    def memory_gib(self, count: int) -> float | None:
        """The memory of the first `count` GPUs together, GiB; None without a GPU."""
        if not self.gpus:
            return None
        return sum(g.memory_mib for g in self.gpus[:count]) / 1024

    def describe(self) -> str:
        """As the engine facts name them: `NVIDIA H200, 143771 MiB`, or `none`."""
        return "; ".join(f"{g.name}, {g.memory_mib} MiB" for g in self.gpus) or "none"
