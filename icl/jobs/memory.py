"""How much memory a job may use, and what to say when a shard does not fit: the least of what the
job was given (`icl train --mem-mb`, SLURM's allocation), what its cgroup allows and what the
machine has available, less what the process already holds."""
from __future__ import annotations

import os

from icl.jobs.provenance import proc_field


def _kib(path: str, key: str) -> int | None:
    """A `key: <n> kB` field of a /proc file in bytes, or None."""
    value = proc_field(path, key)
    return int(value.split()[0]) * 1024 if value else None


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as fh:
                text = fh.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:
            return int(text)
    return None


def resident() -> int:
    """This process's resident memory in bytes (0 where /proc does not say)."""
    return _kib("/proc/self/status", "VmRSS") or 0


def limit(mem_mb: int | None = None) -> tuple[int | None, str]:
    """(bytes this job may use in all, which limit that is), None where nothing says."""
    found = []
    if mem_mb:
        found.append((int(mem_mb) * 2**20, f"the job's mem_mb = {int(mem_mb)}"))
    if os.environ.get("SLURM_MEM_PER_NODE", "").isdigit():          # what sbatch --mem gave the job (MB)
        found.append((int(os.environ["SLURM_MEM_PER_NODE"]) * 2**20, "SLURM's allocation (--mem)"))
    if (cg := _cgroup_limit()) is not None:
        found.append((cg, "its cgroup's memory limit"))
    if (av := _kib("/proc/meminfo", "MemAvailable")) is not None:
        found.append((av + resident(), "the machine's available memory"))
    return min(found) if found else (None, "")


def gb(x: float) -> str:
    """Bytes in GB, or in MB below 0.1 GB where two decimals of a GB would read 0.00."""
    return f"{x / 2**30:.2f} GB" if x >= 0.1 * 2**30 or x == 0 else f"{x / 2**20:.1f} MB"
