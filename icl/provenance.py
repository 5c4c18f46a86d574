"""Where a result came from: code version (git commit, dirty flag), packages, config hash."""
from __future__ import annotations

import functools
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import icl

PACKAGES = ("torch", "numpy", "pandas", "pyarrow", "matplotlib", "seaborn", "snakemake", "jinja2")


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """'<version>+g<commit>' (with '.dirty' when the tree has changes), or the bare version."""
    root = Path(icl.__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"],
                                capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "icl"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return icl.__version__
    return f"{icl.__version__}+g{commit}" + (".dirty" if dirty else "")


def package_versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
