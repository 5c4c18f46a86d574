"""The package's layers point one way: file I/O (icl.io) and per-run measurements (icl.measures)
below the claims (icl.claims), the claims below the analysis and the report; config and plan do
not import each other (the sweep sits below both); and no module imports itself back through
another. Checked on the source, every import statement counted, those inside functions too."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "icl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def imports(name: str) -> set[str]:
    """The icl modules `name` imports (a `from package import module` names the module)."""
    out = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                    for a in node.names}
    # the package itself is no layer: every submodule runs it, and it imports icl.notebook only
    # inside icl.load()
    return {m for m in out if m in MODULES and m not in (name, "icl")}


GRAPH = {m: imports(m) for m in MODULES}


def reach(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for m in GRAPH[todo.pop()] - seen:
            seen.add(m)
            todo.append(m)
    return seen


def test_no_import_cycle():
    cycles = sorted(m for m in MODULES if m in reach(m))
    assert not cycles, cycles


def test_layers_point_one_way():
    above = lambda *prefixes: {m for m in MODULES if m.startswith(prefixes)}
    claims, report = above("icl.claims"), above("icl.report", "icl.figures")
    must_not = {
        "icl.io": claims | report | {"icl.measures", "icl.tables", "icl.analyse", "icl.fits"},
        "icl.measures": claims | report | {"icl.tables", "icl.analyse", "icl.fits"},
        "icl.claims.ldl": report | {"icl.analyse", "icl.tables"},
        "icl.claims.zfb": report | {"icl.analyse", "icl.tables"},
        "icl.tables": claims | report | {"icl.analyse", "icl.fits"},
        "icl.evaluate": claims | report | {"icl.measures", "icl.tables", "icl.analyse"},
        "icl.notebook": report | {"icl.measures", "icl.tables", "icl.analyse", "icl.fits"},
        "icl.report": {"icl.analyse", "icl.claims.ldl", "icl.measures", "icl.tables"},   # reads, draws
        "icl.config": {"icl.plan"},
        "icl.sweep": {"icl.config", "icl.plan"},
    }
    for name, banned in must_not.items():
        assert not reach(name) & banned, (name, sorted(reach(name) & banned))
    assert "icl.measures" in GRAPH["icl.tables"] and "icl.io" in GRAPH["icl.tables"]
    assert {"icl.fits", "icl.claims.ldl", "icl.claims.zfb"} <= GRAPH["icl.analyse"]
