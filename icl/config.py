"""Load and validate config.yaml: the JSON schema first, then the checks a schema cannot express.

Every problem becomes a ConfigError whose message is one line naming the key and what is
allowed, so that the workflow stops before any job with something a person can act on.
"""
from __future__ import annotations

import copy
import functools
import math
from pathlib import Path
from typing import Any

import yaml

from icl.jobs.errors import ConfigError
from icl.settings import Prompts, Tokens, Train
from icl.sweep import apply_override, sweep_axes


@functools.cache
def config_schema() -> dict:
    """The config schema, read when first used: every step imports this module (for
    ConfigError), few validate a config."""
    return yaml.safe_load((Path(__file__).parent / "schema" / "config.schema.yaml").read_text())


def __getattr__(name: str):
    if name == "SCHEMA":            # icl.config.SCHEMA, as before
        return config_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _path(parts) -> str:
    return ".".join(str(p) for p in parts) or "<top level>"


def _describe(err) -> str:
    """One line for one schema violation: where, what is wrong, what is allowed."""
    where = _path(err.absolute_path)
    v, s, inst = err.validator, err.schema, err.instance
    hint = s.get("description") if isinstance(s, dict) else None
    if v == "additionalProperties":
        allowed = sorted(k for k in s.get("properties", {}))
        extra = sorted(set(inst) - set(allowed)) if isinstance(inst, dict) else []
        if err.absolute_path and err.absolute_path[-1] == "experiments" or not allowed:
            return f"{where}: {err.message}"
        return f"{where}: unknown key {', '.join(repr(e) for e in extra)}; allowed keys: {', '.join(allowed)}"
    if v == "required":
        missing = [k for k in s["required"] if k not in inst]
        return f"{where}: missing key {missing[0]!r}; required keys: {', '.join(s['required'])}"
    if v == "enum":
        return f"{where}: {inst!r} is not allowed; allowed: {', '.join(map(str, s['enum']))}"
    if v == "type":
        return f"{where}: {inst!r} has the wrong type; expected {s['type']}" + (f" ({hint})" if hint else "")
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[v]
        return f"{where}: {inst!r} is out of range; must be {op} {s[v]}" + (f" ({hint})" if hint else "")
    if v in ("minItems", "minProperties"):
        return f"{where}: must not be empty" + (f" ({hint})" if hint else "")
    if v == "pattern" or v == "propertyNames":
        bad = inst if v == "pattern" else err.message
        return f"{where}: {bad!r} is not allowed" + (f"; {hint}" if hint else f"; must match {s.get('pattern')}")
    if v == "anyOf":
        return f"{where}: {inst!r} is not allowed" + (f"; {hint}" if hint else "")
    return f"{where}: {err.message}" + (f" ({hint})" if hint else "")


@functools.cache
def _validator():
    """The schema's validator, built once: building it costs more than validating a config with it,
    and a sweep's values are validated one point at a time (_sweep_values_ok)."""
    import jsonschema       # 0.1 s to import: only where a config is validated
    return jsonschema.Draft202012Validator(config_schema())


def _schema_errors(cfg: dict) -> None:
    import jsonschema
    errors = list(_validator().iter_errors(cfg))
    if not errors:
        return
    # propertyNames errors carry the parent path; name the offending key itself.
    err = min(errors, key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    err = jsonschema.exceptions.best_match([err])
    if err.validator == "propertyNames" and err.context:
        sub = err.context[0]
        hint = sub.schema.get("description", f"must match {sub.schema.get('pattern')}")
        raise ConfigError(f"{_path(err.absolute_path)}: key {sub.instance!r} is not allowed; {hint}")
    raise ConfigError(_describe(err))


def _fill_defaults(node: Any, schema: dict) -> Any:
    """Apply the schema's `default`s (also inside if/then branches) so every run spec is complete."""
    if "$ref" in schema:
        schema = config_schema()["$defs"][schema["$ref"].split("/")[-1]]
    if isinstance(node, dict):
        branches = [schema]
        for sub in schema.get("allOf", []):
            cond = sub.get("if", {}).get("properties", {})
            if all(node.get(k) == c.get("const") for k, c in cond.items()):
                branches.append(sub.get("then", {}))
        for br in branches:
            for key, sub in br.get("properties", {}).items():
                if not isinstance(sub, dict):
                    continue
                if key not in node and "default" in sub:
                    node[key] = copy.deepcopy(sub["default"])
                if key in node:
                    node[key] = _fill_defaults(node[key], sub)
            extra = br.get("additionalProperties")
            if isinstance(extra, dict):
                for key in node:
                    if key not in br.get("properties", {}):
                        node[key] = _fill_defaults(node[key], extra)
    elif isinstance(node, list) and isinstance(schema.get("items"), dict):
        node = [_fill_defaults(x, schema["items"]) for x in node]
    return node


def check_experiment(exp: dict, name: str | None = None) -> None:
    """Checks that need more than one field at a time (also run on every point of a sweep)."""
    where = f"experiments.{name}" if name else "experiment"
    tok = exp["tokens"]
    typed = Tokens.of(tok)
    if tok["kind"] == "discrete":
        if typed.features == "orthogonal" and tok["K"] > tok["d"]:
            raise ConfigError(
                f"{where}.tokens.K: K={tok['K']} orthogonal features do not fit in d={tok['d']} dimensions; "
                "allowed: K <= d, or set tokens.features: random")
        probs = typed.probs
        if probs is not None:
            if len(probs) != tok["K"]:
                raise ConfigError(f"{where}.tokens.probs: has {len(probs)} entries; must have K={tok['K']}")
            if not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
                raise ConfigError(f"{where}.tokens.probs: sums to {sum(probs):.6g}; must sum to 1")
    if tok["kind"] == "gaussian" and isinstance(typed.covariance, (list, dict)):
        cov = tok["covariance"]
        lam, key = (cov, "covariance") if isinstance(cov, list) else (cov["eigenvalues"], "covariance.eigenvalues")
        if len(lam) != tok["d"]:
            raise ConfigError(f"{where}.tokens.{key}: has {len(lam)} eigenvalues; must have d={tok['d']}")
    names = [m["name"] for m in exp["models"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{where}.models: duplicate model name {dup[0]!r}; each model needs its own name")
    from icl.models import MODELS   # local: the models package is only needed here
    for i, model in enumerate(exp["models"]):
        for key, problem in MODELS[model["kind"]].check(model, exp):
            raise ConfigError(f"{where}.models.{i}.{key}: {problem}")
    precision = Train.of(exp["train"]).precision
    asked = set(precision.values()) if isinstance(precision, dict) else {precision}
    if "bf16" in asked and not any(MODELS[m["kind"]].bf16_blocks for m in exp["models"]):
        plain = ", ".join(sorted({m["kind"] for m in exp["models"]}))
        allowed = ", ".join(k for k, m in MODELS.items() if m.bf16_blocks)
        raise ConfigError(f"{where}.train.precision: bf16 autocasts a model's inner blocks, and {plain} has none; "
                          f"bf16 is for experiments with the kinds {allowed} (beside them other kinds train at "
                          f"the device's default), else float32 or tf32")
    for i, model in enumerate(exp["models"]):
        if model.get("lr_rule") == "clock":
            _clock_rule_ok(model, exp, f"{where}.models.{i}.lr_rule")
    tr = Train.of(exp["train"])
    if tr.log_every > tr.epochs:
        raise ConfigError(f"{where}.train.log_every: {tr.log_every} is larger than epochs={tr.epochs}")
    if (tr.batch_size or 0) > exp["prompts"]["train"]:
        raise ConfigError(f"{where}.train.batch_size: {tr.batch_size} is larger than prompts.train={exp['prompts']['train']}")
    _training_options_ok(where, exp)
    _prompt_form_ok(where, exp)


def _prompt_form_ok(where: str, exp: dict) -> None:
    """The token form stores every token, so its context has a ceiling; the count form draws a prompt
    as its counts, which only a noiseless discrete prompt is and only a model that reads counts sees
    whole, and which stays fixed (no fresh prompts or curriculum draw tokens as they go)."""
    from icl.models import MODELS, kinds
    p, tok = Prompts.of(exp["prompts"]), Tokens.of(exp["tokens"])
    if not p.counts:
        if p.N > Prompts.TOKEN_MAX_N:
            raise ConfigError(f"{where}.prompts.N: {p.N} tokens a prompt is beyond the token form's {Prompts.TOKEN_MAX_N} "
                              "(every token drawn and stored); allowed: N <= 100000, or prompts.form: counts for "
                              f"models that read counts ({', '.join(sorted(kinds('reads_counts')))}) on noiseless "
                              "discrete tokens")
        return
    if not tok.discrete or tok.noise:
        raise ConfigError(f"{where}.prompts.form: counts draws a prompt as its features' counts, which needs noiseless "
                          f"discrete tokens (tokens.kind: discrete, noise: 0); here tokens.kind is {tok.kind!r}"
                          + (f" with noise {tok.noise:g}" if tok.noise else ""))
    tokenwise = sorted({m["kind"] for m in exp["models"] if not MODELS[m["kind"]].reads_counts})
    if tokenwise:
        raise ConfigError(f"{where}.prompts.form: counts, and the model kind(s) {', '.join(tokenwise)} read every token; "
                          f"allowed: form: counts with {', '.join(sorted(kinds('reads_counts')))} only (or form: tokens)")
    tr = Train.of(exp["train"])
    if tr.fresh or tr.curriculum:
        raise ConfigError(f"{where}.prompts.form: counts keeps one drawn set of prompts; train.fresh and "
                          "train.curriculum draw tokens as training goes (allowed: form: counts without them)")


def _training_options_ok(where: str, exp: dict) -> None:
    """The warmup fits in the run and the curriculum in the prompts (the schema checks each
    number alone)."""
    tr, p = Train.of(exp["train"]), exp["prompts"]
    steps = tr.epochs * tr.steps_per_epoch(p["train"])
    if tr.warmup > steps:
        raise ConfigError(f"{where}.train.warmup: {tr.warmup} steps is longer than the run ({tr.epochs} epochs "
                          f"of {steps // tr.epochs} step(s): {steps} steps); allowed: warmup <= {steps}")
    cur = tr.curriculum
    if not cur:
        return
    if not tr.fresh:
        raise ConfigError(f"{where}.train.curriculum: needs train.fresh: true (a curriculum draws its prompts as it goes)")
    ends = {"dims": (exp["tokens"]["d"], "tokens.d"), "points": (p["N"] + 1, "prompts.N + 1 (the query included)")}
    for key, c in cur.items():
        most, what = ends[key]
        if key == "dims" and exp["tokens"]["kind"] == "discrete":
            raise ConfigError(f"{where}.train.curriculum.dims: discrete tokens are their features; a dims curriculum "
                              "needs gaussian or random_covariance tokens")
        if c["end"] > most:
            raise ConfigError(f"{where}.train.curriculum.{key}.end: {c['end']} exceeds {what} = {most}")
        if c["start"] > c["end"]:
            raise ConfigError(f"{where}.train.curriculum.{key}.start: {c['start']} exceeds its end {c['end']}")
        if key == "points" and c["start"] < 2:
            raise ConfigError(f"{where}.train.curriculum.points.start: {c['start']}; a prompt needs one example "
                              "and the query, allowed: start >= 2")


def _clock_rule_ok(model: dict, exp: dict, where: str) -> None:
    """lr_rule: clock sets a GD step from the task's label covariance at discrete features
    (icl.plan.shards.with_step): it needs all three."""
    import numpy as np
    from icl.tasks import family
    if model["optimizer"] != "gd":
        raise ConfigError(f"{where}: clock sets a GD step; optimizer is {model['optimizer']!r} (allowed: lr_rule: clock with optimizer: gd)")
    if exp["tokens"]["kind"] != "discrete":
        raise ConfigError(f"{where}: clock needs discrete tokens (the clock is read at the features); tokens.kind is {exp['tokens']['kind']!r}")
    if family(exp["task"]["kind"]).label_cov(exp["task"], np.eye(2)) is None:
        raise ConfigError(f"{where}: clock needs a task whose label covariance is known (cosine); task.kind is {exp['task']['kind']!r}")


def _zip_groups_ok(name: str, sweep: dict) -> None:
    """Zipped lists move together, so they need one length; and each key is swept once."""
    groups = sweep.get("zip") or []
    seen = {k for k in sweep if k != "zip"}
    for i, group in enumerate([groups] if isinstance(groups, dict) else groups):
        where = f"experiments.{name}.sweep.zip" + (f".{i}" if isinstance(groups, list) else "")
        lengths = {k: len(v) for k, v in group.items()}
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"{where}: lists of different lengths ({', '.join(f'{k}: {n}' for k, n in lengths.items())}); "
                              "zipped keys move together, one value of each per point, so their lists need equal lengths")
        for k in group:
            if k in seen:
                raise ConfigError(f"{where}.{k}: swept twice (zipped and on its own, or in two zip groups); "
                                  "sweep a key either alone or in one zip group")
            seen.add(k)


def _sweep_values_ok(name: str, exp: dict) -> None:
    """Each sweep key must name an existing setting, and each value (each point of a zip group,
    its values set together) must be valid there."""
    sweep = exp.get("sweep") or {}
    _zip_groups_ok(name, sweep)
    for keys, points in sweep_axes(exp):
        zipped = keys[0] not in sweep
        where = f"experiments.{name}.sweep" + (".zip" if zipped else "")
        for key in keys:
            if key.split(".")[0] == "evaluate":
                raise ConfigError(f"{where}.{key}: the evaluate section cannot be swept; every trained run is "
                                  "evaluated at all evaluate.lengths and evaluate.shifts, so list the values there")
        for point in points:
            trial = copy.deepcopy(exp)
            trial.pop("sweep", None)
            for key, value in zip(keys, point):
                try:
                    apply_override(trial, key, value)
                except KeyError as e:
                    raise ConfigError(f"{where}.{key}: {e.args[0]}") from None
            try:
                _schema_errors({"experiments": {name: trial}})
                check_experiment(_fill_defaults({"experiments": {name: trial}}, config_schema())["experiments"][name], name)
            except ConfigError as e:
                what = ": the point " + ", ".join(f"{k}={v!r}" for k, v in zip(keys, point)) if zipped else \
                    f".{keys[0]}: value {point[0]!r}"
                raise ConfigError(f"{where}{what} is invalid: {e}") from None


# `smoke: true` keeps every shape of an experiment (d, K, N, width, layers, heads, test lengths)
# and cuts what only makes it long: epochs, seeds and the number of prompts.
SMOKE = {"epochs": 2, "train": 4, "test": 4, "evaluate_prompts": 2, "llc_draws": 4, "llc_plateau": 0.5}


def smoke_cut(cfg: dict) -> dict:
    """The config as `smoke: true` runs it: each experiment under the name `<name>_smoke` (its
    results and report apart from the real run's, so nothing computed is overwritten), trained
    SMOKE["epochs"] epochs on its first seed with a few training, test and evaluation prompts."""
    out = {}
    for name, exp in cfg["experiments"].items():
        exp = copy.deepcopy(exp)
        tr, p = exp["train"], exp["prompts"]
        tr["epochs"] = min(tr["epochs"], SMOKE["epochs"])
        tr["log_every"], tr["checkpoint_every"] = 1, tr["epochs"]
        p["train"], p["test"] = min(p["train"], SMOKE["train"]), min(p["test"], SMOKE["test"])
        given = Train.of(tr)
        if given.batch_size:
            tr["batch_size"] = min(tr["batch_size"], p["train"])
        if given.warmup:              # the warmup's shape kept, its length cut with the run
            tr["warmup"] = min(tr["warmup"], tr["epochs"])
        if given.llc:                 # the LLC's path through the job kept: two checkpoints, short chains
            tr["llc"].update(points=min(given.llc.points, 2), chains=min(given.llc.chains, 2),
                             draws=min(given.llc.draws, SMOKE["llc_draws"]), burnin=min(given.llc.burnin, 2))
            if given.llc.plateau:     # the plateau check's path kept, its burn-in (÷ plateau) short: γ/2
                tr["llc"]["plateau"] = max(given.llc.plateau, SMOKE["llc_plateau"])
            if given.llc.batch:
                tr["llc"]["batch"] = min(given.llc.batch, p["train"])
        if exp.get("evaluate"):
            exp["evaluate"]["prompts"] = min(exp["evaluate"]["prompts"], SMOKE["evaluate_prompts"])
        sweep = exp.get("sweep") or {}
        if isinstance(sweep.get("seed"), list):
            sweep["seed"] = sweep["seed"][:1]
        out[f"{name}_smoke"] = exp
    return {**cfg, "experiments": out}


def validate(raw: dict) -> dict:
    """Return the config with defaults filled in (cut by `smoke: true`), or raise ConfigError."""
    if not isinstance(raw, dict):
        raise ConfigError("<top level>: the config must be a mapping with an 'experiments' key")
    cfg = copy.deepcopy(raw)
    for key in ("rerun_on_code_change", "smoke"):
        flag = cfg.get(key)
        if isinstance(flag, str) and flag.lower() in ("true", "false"):   # from `--config key=true`
            cfg[key] = flag.lower() == "true"
    _schema_errors(cfg)
    cfg = _fill_defaults(cfg, config_schema())
    if cfg["smoke"]:
        cfg = smoke_cut(cfg)
    for name, exp in cfg["experiments"].items():
        check_experiment(exp, name)
        _sweep_values_ok(name, exp)
    return cfg


def load(path: str) -> dict:
    """Read a YAML file and validate it."""
    try:
        with open(path) as fh:
            raw = yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} not found") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path!r} is not valid YAML: {str(e).splitlines()[0]}") from None
    return validate(raw)
