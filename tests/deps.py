"""Which installed distributions a command imports, against what `pip install .` (no extras)
installs: the package's declared dependencies and theirs. A module that comes only from the test
extra (pytest pulls pygments, for one) works in .venv and fails on a plain install."""
import importlib.util
import re
import sys
from importlib import metadata

from packaging.requirements import Requirement

IMPORT_TIME = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)")
OWN = ("icl", "sitecustomize")          # the package itself (an editable install has no owner), site hooks


def _name(dist: str) -> str:
    return re.sub(r"[-_.]+", "-", dist).lower()


def declared(dist: str = "icl-dynamics") -> set[str]:
    """The distribution and everything its requirements pull, extras left out (as `pip install .`)."""
    seen, todo = set(), [(dist, ("",))]
    while todo:
        name, extras = todo.pop()
        if _name(name) in seen:
            continue
        seen.add(_name(name))
        for text in metadata.distribution(name).requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
                todo.append((req.name, tuple(req.extras) or ("",)))
    return seen


def vendored(dists: set[str]) -> set[str]:
    """Top-level modules that these distributions ship inside themselves (setuptools' `_vendor`): a
    process that imports setuptools puts its `_vendor` folder on sys.path, and `backports.tarfile`,
    `jaraco` and the others then import by their own names, though no installed distribution owns them."""
    out = set()
    for dist in dists:
        for f in metadata.distribution(dist).files or []:
            parts = f.parts
            if "_vendor" in parts[:-1]:
                name = parts[parts.index("_vendor") + 1]
                if not name.startswith("_") and not name.endswith((".dist-info", ".lock")):
                    out.add(name.removesuffix(".py"))
    return out


def imported_modules(stderr: str) -> set[str]:
    """Top-level modules a process imported, from its `python -X importtime` lines."""
    return {m.group(1).split(".")[0] for m in IMPORT_TIME.finditer(stderr)}


def undeclared(modules: set[str]) -> dict[str, list[str]]:
    """The imported modules whose distributions are installed but not declared: {module: owners}."""
    owners, allowed, out = metadata.packages_distributions(), declared(), {}
    inside = vendored(allowed)
    for mod in sorted(modules):
        if mod in sys.stdlib_module_names or mod in OWN or mod.startswith(("__editable__", "_sysconfigdata")):
            continue
        if mod in inside:            # whether sys.path has the `_vendor` folder depends on what ran before
            continue
        dists = owners.get(mod)
        if dists is None:
            if importlib.util.find_spec(mod) is not None:     # installed, but no distribution owns it
                out[mod] = ["<no distribution>"]
            continue                                          # an optional import that found nothing
        if not any(_name(d) in allowed for d in dists):
            out[mod] = dists
    return out
