# icl-dynamics workflow: thin on purpose. Config, validation, the plan, and includes; all logic
# lives in the `icl` package (see workflow/rules/*.smk for the steps).
import json
import re
import shlex
import sys

import yaml

from icl.config import ConfigError, validate
from icl.plan import plan, shards

# `--configfile X` replaces the default experiments instead of merging into them; `--config k=v`
# overrides top-level settings (shard_size, device, memory_budget_mb).
if "experiments" not in config:
    with open(workflow.basedir + "/config.yaml") as _fh:
        config = {**yaml.safe_load(_fh), **config}

try:
    CFG = validate(config)
    PLANS = {name: plan(CFG, name) for name in CFG["experiments"]}
except ConfigError as _e:
    sys.stderr.write(f"config error: {_e}\n")
    sys.exit(1)

EXPERIMENTS = list(CFG["experiments"])
PY = shlex.quote(sys.executable)


include: "workflow/rules/common.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/theory.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        "reports/index.html",
    default_target: True
