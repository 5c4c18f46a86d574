"""Where a result came from: code version (git commit, dirty flag), packages, config hash.

It imports nothing of the package (the package's version is defined here and icl/__init__.py
takes it from here), so every step may stamp its tables without pulling the rest in."""
from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
from importlib import metadata
from pathlib import Path

__version__ = "0.1.0"
PKG = Path(__file__).resolve().parent.parent   # the icl package's folder (this file is icl/jobs/provenance.py)

PACKAGES = ("torch", "numpy", "pandas", "pyarrow", "matplotlib", "seaborn", "snakemake", "jinja2")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """'<version>+g<commit>' (with '.dirty' when the tree has changes), or the bare version."""
    root = PKG.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "icl"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return __version__
    return f"{__version__}+g{commit}" + (".dirty" if dirty else "")


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """Hash of the package's source (code, templates, schema): changes with any edit, committed or not."""
    h = hashlib.sha256()
    for path in sorted(p for p in PKG.rglob("*") if p.suffix in (".py", ".j2", ".yaml") and p.is_file()):
        h.update(path.relative_to(PKG).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def stamp(config_hash: str | None = None) -> dict:
    """What every table carries in its parquet metadata."""
    out = {"icl_version": __version__, "code_version": code_version(), "code_hash": code_hash()}
    if config_hash:
        out["config_hash"] = config_hash
    return out


def proc_field(path: str, key: str) -> str | None:
    """The value of the first `key: value` line of a /proc file (cpuinfo, meminfo, self/status),
    stripped; None where the file or the line is not there."""
    try:
        with open(path) as fh:
            for line in fh:
                name, sep, value = line.partition(":")
                if sep and name.strip() == key:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), for a shard's hardware provenance."""
    return proc_field("/proc/cpuinfo", "model name") or platform.processor() or "cpu"
