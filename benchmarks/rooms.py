"""The package's rooms and the imports between them, from the source alone (nothing is imported or run):
each folder of icl/ (and the package's top level) with its modules and their lines, the imports from
room to room (every import statement counted, those inside functions too, as tests/test_layers.py
counts them), and the longest module, class and function. Give a checkout to compare two commits:

    .venv/bin/python benchmarks/rooms.py                      # this checkout
    git worktree add /tmp/before 201b462 && .venv/bin/python benchmarks/rooms.py /tmp/before
"""
from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path


def modules(root: Path) -> dict[str, Path]:
    pkg = root / "icl"
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        parts = p.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imported(path: Path, mods: dict[str, Path], me: str) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module for a in node.names}
    return {m for m in out if m in mods and m not in (me, "icl")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    root = Path(ap.parse_args().checkout).resolve()
    mods = modules(root)
    rooms: dict[str, list] = {}
    for m, p in mods.items():
        rooms.setdefault(str(p.parent.relative_to(root)), []).append((m.rsplit(".", 1)[-1] if p.name != "__init__.py" else "__init__",
                                                                       len(p.read_text().splitlines())))
    edges: Counter = Counter()
    for m, p in mods.items():
        for t in imported(p, mods, m):
            a, b = str(p.parent.relative_to(root)), str(mods[t].parent.relative_to(root))
            if a != b:
                edges[a, b] += 1
    print(f"{len(mods)} modules, {sum(n for r in rooms.values() for _, n in r)} lines, {len(rooms)} rooms")
    for r in sorted(rooms):
        items = sorted(rooms[r], key=lambda x: -x[1])
        print(f"\n{r}/  ({len(items)} modules, {sum(n for _, n in items)} lines)")
        print("  " + ", ".join(f"{name} {n}" for name, n in items))
    print("\nimports between rooms (statements):")
    for (a, b), n in sorted(edges.items()):
        print(f"  {a} -> {b}: {n}")
    defs = []
    for p in mods.values():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                defs.append((n.end_lineno - n.lineno + 1, isinstance(n, ast.ClassDef), f"{p.relative_to(root)}:{n.name}"))
    longest = max((len(p.read_text().splitlines()), str(p.relative_to(root))) for p in mods.values())
    print(f"\nlongest module: {longest[1]} ({longest[0]} lines)")
    for is_class, what in ((True, "class"), (False, "function")):
        n, _, where = max(d for d in defs if d[1] == is_class)
        print(f"longest {what}: {where} ({n} lines)")


if __name__ == "__main__":
    main()
