"""`icl check --estimate`: the training time of every job predicted from a few timed epochs of one
shard per shape, scaled by runs, epochs and logged states; the memory each job asks for is the
planner's. (Its accuracy against measured jobs is a benchmark: benchmarks/estimate.py.)"""
import copy
import subprocess
import sys

import pytest
import yaml

from conftest import TINY
from icl.config import validate
from icl.estimate import Calibration, estimate, report
from icl.plan import plan, shard_mem_mb, shards, train_threads


def test_a_job_is_its_start_up_plus_the_calibrated_parts_scaled_by_runs_and_epochs():
    cal = Calibration(runs=8, prepare_s=0.4, epoch_s=0.05, log_s=0.02, write_s=0.1)
    # 16 runs, 400 epochs logged every 4 (101 logged states), 1.5 s start-up: twice one shard's work
    want = 1.5 + 2 * (0.4 + 400 * 0.05 + 101 * 0.02 + 0.1)
    assert cal.seconds(16, 400, 4, 1.5) == pytest.approx(want)
    assert cal.seconds(8, 800, 4, 0.0) - cal.seconds(8, 400, 4, 0.0) == pytest.approx(400 * 0.05 + 100 * 0.02)


@pytest.fixture(scope="module")
def two_shapes():
    raw = copy.deepcopy(TINY)
    raw["shard_size"] = 2          # 4 runs of each model: several shards of each shape
    return validate(raw)


def test_every_job_gets_a_row_with_the_planners_memory_and_the_jobs_threads(two_shapes):
    rows = estimate(two_shapes, device="cpu")
    by_shard = shards(plan(two_shapes, "tiny"))
    assert sorted(r["shard"] for r in rows) == sorted(by_shard)
    for r in rows:
        assert r["runs"] == len(by_shard[r["shard"]])
        assert r["mem_mb"] == shard_mem_mb(by_shard[r["shard"]])
        assert r["threads"] == train_threads(len(by_shard))
        assert r["seconds"] > 0
    # shards of one shape share one calibration: equal runs and epochs, equal predictions
    for kind in ("softmax_q", "transformer_block"):
        mine = {}
        for r in rows:
            if r["shard"].startswith(kind):
                mine.setdefault(r["runs"], set()).add(round(r["seconds"], 9))
        assert sum(map(len, mine.values())) >= 1 and all(len(v) == 1 for v in mine.values()), mine
    text = report(rows, cores=2)
    assert text.splitlines()[1].startswith("tiny") and text.splitlines()[-1].startswith("total")


def test_the_command_prints_the_estimate(tmp_path):
    (tmp_path / "my.yaml").write_text(yaml.safe_dump(TINY))
    res = subprocess.run([sys.executable, "-m", "icl", "check", "--estimate", "--cores", "2", str(tmp_path / "my.yaml")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "tiny: 8 runs in 2 shards" in res.stdout
    assert "timing a few epochs of" in res.stderr
    last = res.stdout.strip().splitlines()[-1].split()
    assert last[0] == "total" and last[1] == "8" and last[2] == "2"


def test_a_curriculum_is_timed_at_its_end(monkeypatch):
    """Garg's curriculum makes the first steps short and cheap; the estimate times full prompts
    (an upper bound), not the first stage, which would under-predict every later step."""
    import icl.train
    from icl import estimate as est
    raw = {"experiments": {"lin": {
        "tokens": {"kind": "gaussian", "d": 4}, "task": {"kind": "linear"},
        "prompts": {"N": 8, "train": 8, "test": 8},
        "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3}],
        "train": {"epochs": 40, "fresh": True,
                  "curriculum": {"points": {"start": 2, "end": 9, "inc": 1, "interval": 10}}}}}}
    runs = plan(validate(raw), "lin")
    seen = []
    real = icl.train.ShardTraining

    def spy(rs, paths, dev, saved=None):
        seen.extend(r["spec"]["train"] for r in rs)
        return real(rs, paths, dev, saved)
    monkeypatch.setattr(icl.train, "ShardTraining", spy)
    cal = est._timed(runs[:1], "cpu", 1, epochs=2)
    assert seen and all("curriculum" not in t for t in seen)
    assert "curriculum" in runs[0].spec["train"]        # the plan's own spec untouched
    assert cal.epoch_s > 0
