#!/usr/bin/env bash
# Create .venv and install icl-dynamics into it; idempotent and quick when already done.
#
# PyTorch is installed first, on its own, so that the package's "torch>=2.2" is already met and
# pip never resolves torch itself (which on a CPU machine would pull several GB of CUDA wheels).
#   TORCH_SPEC   what to install for torch (default: torch==2.13.0). On a machine with a local
#                CPU wheel (pip find-links) this takes it; on a GPU machine pip takes the CUDA
#                build of the same version from the package index.
#   VENV         where the environment lives (default: .venv in the repository root).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
stamp="$VENV/.icl-installed"
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
if ! "$VENV/bin/python" -W ignore -c "import torch" 2>/dev/null; then
  echo "setup: installing $TORCH_SPEC" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check "$TORCH_SPEC" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  "$VENV/bin/python" -W ignore -c "import torch" || { echo "setup: torch failed to install ($TORCH_SPEC)" >&2; exit 1; }
fi
echo "setup: installing icl-dynamics and its dependencies" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
"$VENV/bin/python" -c "import icl, snakemake, pandas, pyarrow" || { echo "setup: install failed" >&2; exit 1; }
touch "$stamp"
