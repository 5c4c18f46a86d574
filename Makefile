# The two commands of the README. Each installs what it needs (scripts/setup.sh) first.
CORES ?= all
.PHONY: run test setup

run: setup
	.venv/bin/snakemake --cores $(CORES) --workflow-profile workflow/profiles/default

test: setup
	.venv/bin/python -m pytest

setup:
	@bash scripts/setup.sh
