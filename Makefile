# The two commands of the README. Each installs what it needs (scripts/setup.sh) first.
CORES ?= all
# pytest workers (pytest-xdist), each test file on one worker so that its module fixtures are made
# once, the longest files first (tests/conftest.py: LONG_FILES): the suite waits on subprocesses
# much of the time, and a second worker fills that time
WORKERS ?= 2
.PHONY: run test check setup

run: setup
	.venv/bin/snakemake --cores $(CORES) --workflow-profile workflow/profiles/default

test: setup
	.venv/bin/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# Everything the README promises: the quick suite and the slow checks (-m slow: the paper smoke
# run and estimate, the SLURM run from scratch, the memory checks, ...). CI runs this.
check: setup
	.venv/bin/python -m pytest -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "slow or not slow"

setup:
	@bash scripts/setup.sh
