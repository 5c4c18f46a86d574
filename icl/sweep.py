"""A sweep's points: the cartesian product of its axes, a `zip` group being one axis. Both the
config's validation (every point must be valid) and the plan (one run per model and point) read
them from here, so neither imports the other.
"""
from __future__ import annotations

import copy
import itertools
import math

from icl.jobs.errors import ConfigError

MAX_RUNS = 1_000_000


def apply_override(exp: dict, key: str, value) -> None:
    """Set a dotted key in an experiment; `models.<name>.<field>` addresses a model by name."""
    parts = key.split(".")
    if parts == ["seed"]:
        exp["seed"] = value
        return
    if parts[0] == "models":
        if len(parts) != 3:
            raise KeyError(f"model keys look like models.<name>.<field>, got {key!r}")
        match = [m for m in exp["models"] if m["name"] == parts[1]]
        if not match:
            names = ", ".join(m["name"] for m in exp["models"])
            raise KeyError(f"no model named {parts[1]!r}; models: {names}")
        node, leaf = match[0], parts[2]
    else:
        node = exp
        for p in parts[:-1]:
            if not isinstance(node, dict) or p not in node:
                raise KeyError(f"unknown key {key!r}: {p!r} is not a section of the experiment")
            node = node[p]
        leaf = parts[-1]
    if not isinstance(node, dict):
        raise KeyError(f"unknown key {key!r}")
    if leaf not in node:
        known = ", ".join(sorted(node))
        raise KeyError(f"unknown key {key!r}: {leaf!r} is not set in that section (it has: {known})")
    node[leaf] = value


def sweep_axes(exp: dict) -> list[tuple[tuple[str, ...], list[tuple]]]:
    """The sweep as the axes of its cartesian product, each (keys, points): a plain key is an axis
    of one key; a `zip` group (a mapping of equal-length lists, or a list of such mappings) is one
    axis whose keys move together, its i-th point taking the i-th value of every list.

    One order, whatever order the config lists keys in: `seed` first, then alphabetically; a zip
    group's keys in that order, the group placed by its first key. A mapping's key order does not
    survive every way a config travels (the workflow hands it to the plan job as JSON with sorted
    keys; YAML dumps and merges reorder it too), so nothing the plan computes may depend on it."""
    rank = lambda k: (k != "seed", k)
    sweep = exp.get("sweep") or {}
    groups = sweep.get("zip") or []
    axes = [((k,), [(v,) for v in values]) for k, values in sweep.items() if k != "zip"]
    for group in [groups] if isinstance(groups, dict) else groups:
        keys = tuple(sorted(group, key=rank))
        axes.append((keys, list(zip(*(group[k] for k in keys), strict=True))))   # lengths: icl.config checks
    return sorted(axes, key=lambda a: rank(a[0][0]))


def sweep_keys(exp: dict) -> list[str]:
    """Every swept key, in the plan's order (sweep_axes)."""
    return [k for keys, _ in sweep_axes(exp) for k in keys]


def expand(exp: dict, check=None) -> list[dict]:
    """The cartesian product of the sweep's axes, one run spec per (model, sweep point).
    `check(point)` is run on every point of a sweep (the plan passes icl.config.check_experiment:
    values valid one by one can still clash, tokens.K with tokens.d, ...)."""
    axes = sweep_axes(exp)
    keys = [k for ks, _ in axes for k in ks]
    n = len(exp["models"]) * math.prod(len(points) for _, points in axes)
    if n > MAX_RUNS:
        raise ConfigError(f"sweep: expands to {n:,} runs; at most {MAX_RUNS:,} per experiment (split it)")
    specs = []
    for combo in itertools.product(*(points for _, points in axes)):
        values = [v for point in combo for v in point]
        point = copy.deepcopy(exp)
        for k, v in zip(keys, values):
            apply_override(point, k, v)
        if keys and check is not None:
            try:
                check(point)
            except ConfigError as e:
                where = ", ".join(f"{k}={v!r}" for k, v in zip(keys, values))
                raise ConfigError(f"sweep: the point {where} is invalid: {e}") from None
        for model in point["models"]:
            spec = {"tokens": point["tokens"], "task": point["task"], "prompts": point["prompts"],
                    "model": model, "train": point["train"], "seed": point["seed"]}
            if point.get("evaluate"):
                spec["evaluate"] = point["evaluate"]
            specs.append(spec)
    return specs
