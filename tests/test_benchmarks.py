"""The benchmarks' own checks, without their timings: benchmarks/pipeline.py times the pipeline
against ../shared/reference/naive_softmax_q.py only after the two train the same model."""
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))
import pipeline  # noqa: E402


@pytest.mark.skipif(not pipeline.REFERENCE.exists(), reason="../shared/reference is not beside the checkout")
def test_the_reference_loop_and_the_ensemble_give_the_same_losses():
    """The reference's own data and model (executed from its file) and icl's softmax_q ensemble on
    the same prompts: the same train-loss curves, to float32 rounding."""
    assert pipeline.same_losses(epochs=30, runs=6) < 1e-4


def test_the_equality_check_can_fail(monkeypatch):
    """A pipeline that trained another model (a step twice as large) is caught before any timing."""
    if not pipeline.REFERENCE.exists():
        pytest.skip("../shared/reference is not beside the checkout")
    from icl.train import optim
    real = optim.build
    monkeypatch.setattr(optim, "build", lambda kind, lr: real(kind, 2 * lr))
    assert pipeline.same_losses(epochs=30, runs=6) > 1e-2


@pytest.mark.parametrize("script", ["pipeline.py", "evaluate.py", "memory.py", "report_pages.py", "screenshots.py",
                                    "rooms.py", "gpt_escape.py"])
def test_benchmark_scripts_explain_themselves(script):
    res = subprocess.run([sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "usage:" in res.stdout and ".venv/bin/python benchmarks/" in res.stdout


@pytest.mark.parametrize("args", [[], ["bogus"]])
def test_the_gpu_script_says_how_it_is_called_and_installs_nothing_without_a_part(args):
    """benchmarks/gpu_check.sh runs only on a lent GPU machine; called without `bench` or `tests` it
    says how to call it and stops before installing or running anything."""
    res = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout.startswith("usage: bash benchmarks/gpu_check.sh bench|tests")
    assert "pip" not in res.stdout + res.stderr


def test_the_rooms_of_this_checkout():
    """benchmarks/rooms.py reads a checkout's package from its source: every module counted once, the
    models room holding the interface apart from the memory model, the longest module named."""
    res = subprocess.run([sys.executable, str(BENCH / "rooms.py")], capture_output=True, text=True, check=True)
    n_modules = len(list((BENCH.parent / "icl").rglob("*.py")))
    assert res.stdout.startswith(f"{n_modules} modules")
    assert "icl/models/  (" in res.stdout and "memory " in res.stdout and "longest module: icl/" in res.stdout
