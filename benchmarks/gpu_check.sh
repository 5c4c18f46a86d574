#!/usr/bin/env bash
# The GPU measurements of issue 53, in one prepared script for a lent GPU machine (the `device`
# tool: one call of `bench`, then at once one of `tests`). It expects, in the repository root, .whl/
# holding the wheels the image lacks (jsonschema, snakemake and their needs; docs/performance.md says
# how to fetch them) and gpt_loop.py (../shared/reference's, which does not travel). Logs go to $OUT.
#   bash benchmarks/gpu_check.sh bench     # the GPT against the loop at s5 and zfb, profiles, paper estimate
#   bash benchmarks/gpu_check.sh tests     # the quick suite with CUDA as the jobs' device
set -o pipefail
case "$1" in bench|tests) ;; *) echo "usage: bash benchmarks/gpu_check.sh bench|tests (on a lent GPU machine)"; exit 2 ;; esac
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD GPT_LOOP=$PWD/.whl/gpt_loop.py
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/card.txt"
python3 -c "import torch, sys; print('torch', torch.__version__, 'python', sys.version.split()[0])" | tee -a "$OUT/card.txt"
case "$1" in
bench)
  t0=$SECONDS
  timeout 230 python3 benchmarks/gpt_throughput.py --device cuda --shapes s5 --runs 32 --steps 25 --procs 8 --loop-runs 1 \
    --precisions bf16 --compile yes --side-by-side-only --loop-setups bf16+compiled --profile 2>"$OUT/s5.err" | tee "$OUT/s5.log"
  echo "s5: $((SECONDS - t0)) s"; t0=$SECONDS
  timeout 170 python3 benchmarks/gpt_throughput.py --device cuda --shapes zfb --runs 256 --steps 100 --procs 8 --loop-runs 2 \
    --precisions bf16 --compile yes graphs --side-by-side-only --loop-setups bf16+compiled --profile 2>"$OUT/zfb.err" | tee "$OUT/zfb.log"
  echo "zfb: $((SECONDS - t0)) s"; t0=$SECONDS
  timeout 100 python3 -m icl check --estimate config/paper.yaml --device cuda 2>"$OUT/estimate.err" | tee "$OUT/estimate.log"
  echo "estimate: $((SECONDS - t0)) s"
  tail -n 3 "$OUT"/*.err
  ;;
tests)
  timeout "${TESTS_S:-230}" python3 -m pytest -n 12 --dist loadfile -v -p no:cacheprovider -o console_output_style=classic \
    > "$OUT/tests.log" 2>&1
  echo "pytest exit $?"
  grep -E "FAILED|ERROR" "$OUT/tests.log" | sort | uniq | head -40
  tail -n 3 "$OUT/tests.log"
  ;;
esac
