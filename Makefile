# The two commands of the README. Each installs what it needs (scripts/setup.sh) first.
CORES ?= all
.PHONY: run test check setup

run: setup
	.venv/bin/snakemake --cores $(CORES) --workflow-profile workflow/profiles/default

test: setup
	.venv/bin/python -m pytest

# Everything the README promises: the quick suite and the slow checks (-m slow: the paper smoke
# run and estimate, the SLURM run from scratch, the memory checks, ...). CI runs this.
check: setup
	.venv/bin/python -m pytest -m "slow or not slow"

setup:
	@bash scripts/setup.sh
