"""The package's layers point one way: file I/O (icl.store.io) and per-run measurements (icl.tables.measures)
below the claims (icl.analyse.claims), the claims below the analysis and the report; config and plan do
not import each other (the sweep sits below both); the jobs (train, evaluate) do not import the
planner; the tasks sit below the theory; provenance and runtime import nothing of the package;
and no module imports itself back through another. Checked on the source, every import
statement counted, those inside functions too."""
import ast
from pathlib import Path

import pytest

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


def test_ground_floor_imports_nothing_of_the_package():
    """icl.jobs.provenance (every step stamps its tables with it) and icl.jobs.runtime (what the planner
    and its jobs share) import no icl module, not even the package itself."""
    for name in ("icl.jobs.provenance", "icl.jobs.runtime", "icl.tasks"):
        tree = ast.parse(MODULES[name].read_text())
        found = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names if a.name.split(".")[0] == "icl"]
        found += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "icl"]
        assert not found, (name, found)


def test_no_import_cycle():
    cycles = sorted(m for m in MODULES if m in reach(m))
    assert not cycles, cycles


def test_layers_point_one_way():
    above = lambda *prefixes: {m for m in MODULES if m.startswith(prefixes)}
    claims, report = above("icl.analyse.claims"), above("icl.report")
    must_not = {
        "icl.store.io": claims | report | {"icl.tables.measures", "icl.tables.build", "icl.analyse.verdicts", "icl.analyse.fits"},
        "icl.tables.measures": claims | report | {"icl.tables.build", "icl.analyse.verdicts", "icl.analyse.fits"},
        "icl.analyse.claims.ldl": report | {"icl.analyse.verdicts", "icl.tables.build"},
        "icl.analyse.claims.zfb": report | {"icl.analyse.verdicts", "icl.tables.build"},
        "icl.tables.build": claims | report | {"icl.analyse.verdicts", "icl.analyse.fits"},
        "icl.evaluate.cells": claims | report | {"icl.tables.measures", "icl.tables.build", "icl.analyse.verdicts", "icl.plan.shards", "icl.train.loop"},
        "icl.train.loop": {"icl.plan.shards"},              # the jobs share icl.jobs.runtime with the planner, never import it
        "icl.analyse.fits": claims,                     # exclude is icl.analyse.fits' own, the claims take it from there
        "icl.tasks": {m for m in MODULES if m.startswith("icl.theory")},   # the theory reads the tasks
        "icl.theory.table": {m for m in MODULES if m.startswith("icl.models")},   # the models read the theory
        "icl.notebook": report | {"icl.tables.measures", "icl.tables.build", "icl.analyse.verdicts", "icl.analyse.fits"},
        "icl.report.page": {"icl.analyse.verdicts", "icl.analyse.claims.ldl", "icl.tables.measures", "icl.tables.build"},   # reads, draws
        "icl.config": {"icl.plan.shards"},
        "icl.sweep": {"icl.config", "icl.plan.shards"},
    }
    for name, banned in must_not.items():
        assert not reach(name) & banned, (name, sorted(reach(name) & banned))
    assert "icl.tables.measures" in GRAPH["icl.tables.build"] and "icl.store.io" in GRAPH["icl.tables.build"]
    assert {"icl.analyse.fits", "icl.analyse.claims.ldl", "icl.analyse.claims.zfb"} <= GRAPH["icl.analyse.verdicts"]


def test_report_package_points_one_way():
    """icl/report/: the page (icl.report.page) on top reads the figure modules (headline, heads,
    ldl, zfb), and they draw with icl.report.figures, which imports none of them; none imports the
    page back, nothing outside the report imports it but the command line."""
    report = {m for m in MODULES if m.startswith("icl.report")}
    assert report >= {"icl.report.page", "icl.report.figures", "icl.report.headline"}, sorted(report)
    assert not reach("icl.report.figures") & report, sorted(reach("icl.report.figures") & report)
    for name in report - {"icl.report.page"}:
        assert "icl.report.page" not in reach(name), name
    assert {"icl.report.headline", "icl.report.heads", "icl.report.ldl", "icl.report.zfb",
            "icl.report.figures"} <= GRAPH["icl.report.page"]
    outside = sorted(m for m in MODULES if not m.startswith("icl.report") and GRAPH[m] & report)
    assert outside == ["icl.cli"], outside


def test_the_page_composes_and_its_siblings_draw():
    """icl.report.page draws nothing itself: it imports no matplotlib, and a model's training figures
    come from icl.report.curves (issue 51.5)."""
    tree = ast.parse((PKG / "report" / "page.py").read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | \
        {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.split(".")[0] == "matplotlib"}, imported
    assert "icl.report.curves" in GRAPH["icl.report.page"]


def test_the_model_interface_is_apart_from_its_memory_and_attention_summaries():
    """icl/models/base.py holds the interface a training loop calls (Model, Step, Batch and the
    prompt layouts); the memory model a planner asks (Memory) and the attention summaries every
    kind's diagnostics compute live in modules of their own, and the memory model imports no torch
    (issue 51.4)."""
    tree = ast.parse((PKG / "models" / "base.py").read_text())
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
    methods = {n.name for n in model.body if isinstance(n, ast.FunctionDef)}
    assert not methods & {"train_bytes", "eval_bytes", "step_floats", "prompt_floats", "log_bytes"}, methods
    assert [b.id for b in model.bases] == ["Memory"]
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert not {f for f in functions if "attention" in f or f.endswith("_own")}, functions
    assert GRAPH["icl.models.memory"] <= {"icl.settings"}
    mem = ast.parse((PKG / "models" / "memory.py").read_text())
    assert not [n for n in ast.walk(mem) if isinstance(n, (ast.Import, ast.ImportFrom))
                and "torch" in ast.unparse(n)]


# A kind's name as a string outside icl/models/ only where it is data, never to branch on: a
# claim, a theory table or a figure asks icl.models.kinds(trait) instead (icl/models/base.py).
NAME_AS_DATA = {
    ("analyse/claims/zfb/inputs.py", 'TRAINED_LSA = "lsa"'): "shift.parquet's predictor label of trained LSA rows",
}


def kind_name_literals(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """(line, source line) of every string literal in `path` that is exactly a kind's name (any
    quotes; docstrings, comments and longer strings do not count)."""
    import io
    import tokenize
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):       # an f-string
                continue
            if value in names:
                out.append((tok.start[0], tok.line.strip()))
    return out


def test_no_kind_name_tested_outside_models():
    """Nothing outside icl/models/ compares against a kind's name (`== "softmax_q"`, `in ("lsa",
    ...)`, `frozenset({"gpt"})`, a dict keyed by kinds used as a branch) or imports a kind's class:
    it asks a trait. Kind names as data are listed in NAME_AS_DATA, each with why."""
    from icl.models import MODELS
    names = set(MODELS)
    classes = {m.__name__ for m in MODELS.values()}
    modules = {m.__module__.rsplit(".", 1)[-1] for m in MODELS.values()}
    found, used = [], set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("models/"):
            continue
        for line, src in kind_name_literals(path, names):
            allowed = [k for k in NAME_AS_DATA if k[0] == rel and src.startswith(k[1])]
            used.update(allowed)
            if not allowed:
                found.append(f"icl/{rel}:{line}: {src}")
        for node in ast.walk(ast.parse(path.read_text())):      # nor a kind's class or module
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("icl.models"):
                bad = {a.name for a in node.names} & (classes | modules)
                if bad or node.module.split(".")[-1] in modules:
                    found.append(f"icl/{rel}:{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
    assert not found, "a kind's name tested outside icl/models/ (ask icl.models.kinds(trait)):\n" + "\n".join(found)
    assert used == set(NAME_AS_DATA), f"stale NAME_AS_DATA entries: {sorted(set(NAME_AS_DATA) - used)}"


def test_kinds_reads_traits():
    import pytest
    from icl.models import MODELS, kinds
    assert kinds("linear_in_labels") == {"softmax_q", "lsa"} and kinds("mean_field") == {"softmax_q"}
    assert kinds("has_positions") == {"gpt"} and kinds("nonlinear") == {"transformer_block", "gpt"}
    assert set(MODELS) - kinds("linear_in_labels") == kinds("nonlinear")     # zfb.beyond_lsa's, the report's
    with pytest.raises(AttributeError):
        kinds("kind")                                  # a name, not a trait


def test_the_train_section_is_read_through_its_typed_settings():
    """No module reads a run's `train` section with .get(key, default) (a default the schema could
    disagree with): icl.settings.Train holds each setting, its default the schema's or, for a
    setting whose absence means off, beside its field (issue 51.2)."""
    import re
    pattern = re.compile(r'(\["train"\]|\btr|\btrain)\.get\(')
    found = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob("*.py") if p.name != "settings.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


def test_the_tokens_section_is_read_through_its_typed_settings():
    """No module reads a run's `tokens` section with .get(key, default): icl.settings.Tokens holds
    each setting, an absent one at the schema's default for its kind (issue 51.2); every setting
    the schema allows a token kind has a field, and the defaults are the schema's."""
    import re
    import yaml
    from icl.settings import Tokens
    pattern = re.compile(r'(\["tokens"\]|\btok|\btokens)\.get\(')
    found = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob("*.py") if p.name != "settings.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found
    schema = yaml.safe_load((PKG / "schema" / "config.schema.yaml").read_text())["$defs"]["tokens"]
    allowed = {k for b in schema["allOf"] for k in b["then"]["properties"]}
    assert allowed == set(Tokens.__dataclass_fields__), allowed ^ set(Tokens.__dataclass_fields__)
    assert Tokens.of({"kind": "discrete", "d": 4, "K": 2, "delta": 1.0}).noise == 0.0
    assert Tokens.of({"kind": "random_covariance", "d": 4}).scale == 1.0
    assert Tokens.of({"kind": "gaussian", "d": 4}).covariance == "identity"
    with pytest.raises(ValueError, match=r"tokens: settings \['sclae'\] have no field"):
        Tokens.of({"kind": "random_covariance", "d": 4, "sclae": 2.0})


def test_the_prompts_section_is_read_through_its_typed_settings():
    """The prompts section's required settings (N, train, test) have no default; its one optional
    setting, form, has none in the schema either (absent, so existing run ids stay) and its absence
    means tokens beside its field in icl.settings.Prompts; every setting the schema allows has a field."""
    import re
    import yaml
    from icl.settings import Prompts
    schema = yaml.safe_load((PKG / "schema" / "config.schema.yaml").read_text())
    prompts = next(e["properties"]["prompts"] for e in _objects(schema) if "prompts" in e.get("properties", {})
                   and e["properties"]["prompts"].get("required"))
    assert set(prompts["required"]) == {"N", "train", "test"}, prompts
    assert set(prompts["properties"]) == set(Prompts.__dataclass_fields__), prompts
    assert not [k for k, v in prompts["properties"].items() if "default" in v]
    assert Prompts.of({"N": 4, "train": 1, "test": 1}).form == "tokens" and not Prompts.of(
        {"N": 4, "train": 1, "test": 1}).counts
    with pytest.raises(ValueError, match=r"prompts: settings \['from'\] have no field"):
        Prompts.of({"N": 4, "train": 1, "test": 1, "from": "counts"})
    pattern = re.compile(r'\["prompts"\]\.get\(')        # a Batch's `prompts` (tensors) is no section
    found = [f"{p.relative_to(PKG)}:{i}" for p in PKG.rglob("*.py") if p.name != "settings.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


def _objects(node):
    """Every mapping in a parsed schema, depth first."""
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _objects(v)
    elif isinstance(node, list):
        for v in node:
            yield from _objects(v)


def test_a_train_setting_unknown_to_its_dataclass_is_refused():
    """Every key the schema allows in `train` has a field (a new one must be added there too)."""
    import yaml
    from icl.settings import Train
    schema = yaml.safe_load((PKG / "schema" / "config.schema.yaml").read_text())
    allowed = set(schema["$defs"]["experiment"]["properties"]["train"]["properties"])
    assert allowed == {f for f in Train.__dataclass_fields__}, allowed ^ set(Train.__dataclass_fields__)
    with pytest.raises(ValueError, match=r"train: settings \['warmpu'\] have no field"):
        Train.of({"epochs": 1, "log_every": 1, "checkpoint_every": 1, "fresh": False, "warmpu": 3})


def test_planning_imports_no_torch():
    """The plan runs when Snakemake parses the workflow, on every `snakemake` call: planning a config
    (its memory estimates, its checks, the clock rule's steps) never imports torch (1-3 s a process),
    nor do the tables and the report. In a fresh interpreter, so nothing imported before counts."""
    import subprocess
    import sys
    code = ("import sys, yaml; from icl.config import validate; from icl.plan.shards import plan; "
            "import icl.tables.build, icl.report.page, icl.analyse.verdicts; "
            "cfg = validate(yaml.safe_load(open('config.yaml'))); [plan(cfg, e) for e in cfg['experiments']]; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=PKG.parent, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
