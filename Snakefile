# icl-dynamics workflow: thin on purpose. Config, validation, the plan, and includes; all logic
# lives in the `icl` package (see workflow/rules/*.smk for the steps).
import json
import re
import shlex
import sys
from pathlib import Path

import yaml
from snakemake_interface_executor_plugins.settings import DeploymentMethod

from icl.config import ConfigError, validate
from icl.plan.shards import plan, shards

# `--configfile X` replaces the default experiments instead of merging into them; `--config k=v`
# overrides top-level settings (shard_size, device, memory_budget_mb). The default config sits
# beside this file, so that `-s path/Snakefile` works from any directory.
if "experiments" not in config:
    config = {**yaml.safe_load((Path(workflow.basedir) / "config.yaml").read_text()), **config}

try:
    CFG = validate(config)
    PLANS = {name: plan(CFG, name) for name in CFG["experiments"]}
except ConfigError as _e:
    sys.stderr.write(f"config error: {_e}\n")
    sys.exit(1)

EXPERIMENTS = list(CFG["experiments"])

# Every rule runs `python -m icl <step>`. Without a software deployment method that is the
# interpreter Snakemake runs in (.venv/bin/snakemake works without activating the venv; a SLURM
# job inherits it too). With `--sdm conda` each rule's environment (workflow/envs/icl.yaml) holds
# the dependencies and the jobs import icl from this checkout. A shell prefix, not a param: a
# param holding a path would rerun every job when the checkout moves.
if DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method:
    shell.prefix(f"set -euo pipefail; export PYTHONPATH={shlex.quote(workflow.basedir)}; ")
else:
    shell.prefix(f"set -euo pipefail; export PATH={shlex.quote(str(Path(sys.executable).parent))}:\"$PATH\"; ")


include: "workflow/rules/common.smk"
include: "workflow/rules/plan.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/tables.smk"
include: "workflow/rules/theory.smk"
include: "workflow/rules/analyse.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        "reports/index.html",
    default_target: True
