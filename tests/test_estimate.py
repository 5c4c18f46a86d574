"""`icl check --estimate`: the training time of every job predicted from a few timed epochs of one
shard per shape, scaled by runs, epochs and logged states; the memory each job asks for is the
planner's. (Its accuracy against measured jobs is a benchmark: benchmarks/estimate.py.)"""
import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import TINY
from icl.config import validate
from icl.plan.estimate import Calibration, estimate, report
from icl.plan.shards import plan, shard_mem_mb, shards, train_threads


def test_a_job_is_its_start_up_plus_the_calibrated_parts_scaled_by_runs_and_epochs():
    cal = Calibration(runs=8, prepare_s=0.4, epoch_s=0.05, log_s=0.02, write_s=0.1)
    # 16 runs, 400 epochs logged every 4 (101 logged states), 1.5 s start-up: twice one shard's work
    want = 1.5 + 2 * (0.4 + 400 * 0.05 + 101 * 0.02 + 0.1)
    assert cal.seconds(16, 400, 4, 1.5) == pytest.approx(want)
    assert cal.seconds(8, 800, 4, 0.0) - cal.seconds(8, 400, 4, 0.0) == pytest.approx(400 * 0.05 + 100 * 0.02)
    # the LLC: its SGLD steps priced as training steps of the same runs on its chains' prompts
    from icl.plan.estimate import llc_epochs, llc_work
    spec = {"prompts": {"train": 300}, "train": {"epochs": 400, "log_every": 4, "checkpoint_every": 50, "fresh": False,
                                                 "batch_size": 100,
                                                 "llc": {"points": 10, "chains": 4, "draws": 200, "burnin": 100,
                                                         "epsilon": 1e-3, "gamma": 100.0, "batch": 50, "together": 2}}}
    steps, size = llc_work(spec)
    # 10 checkpoints of 300 steps and the plateau check's 100/0.1 + 200, each in 2 passes of 2 chains
    assert (steps, size) == ((10 * 300 + 1000 + 200) * 2, 2 * 50 / 100)
    spec["train"]["llc"]["plateau"] = 0                           # no check: the checkpoints alone
    assert llc_work(spec) == (10 * 300 * 2, 2 * 50 / 100)
    spec["train"]["llc"].pop("plateau")
    assert llc_epochs(spec) == pytest.approx(steps * size / 3)    # 3 training steps an epoch
    assert cal.seconds(8, 400, 4, 0.0, llc_epochs(spec)) - cal.seconds(8, 400, 4, 0.0) == pytest.approx(
        llc_epochs(spec) * 0.05)
    spec["train"].pop("llc")
    assert llc_work(spec) == (0, 0.0) and llc_epochs(spec) == 0.0


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
    import icl.train.loop
    from icl.plan import estimate as est
    raw = {"experiments": {"lin": {
        "tokens": {"kind": "gaussian", "d": 4}, "task": {"kind": "linear"},
        "prompts": {"N": 8, "train": 8, "test": 8},
        "models": [{"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2, "init_scale": 0.3}],
        "train": {"epochs": 40, "fresh": True,
                  "curriculum": {"points": {"start": 2, "end": 9, "inc": 1, "interval": 10}}}}}}
    runs = plan(validate(raw), "lin")
    seen = []
    real = icl.train.loop.ShardTraining

    def spy(rs, paths, dev, saved=None):
        seen.extend(r["spec"]["train"] for r in rs)
        return real(rs, paths, dev, saved)
    monkeypatch.setattr(icl.train.loop, "ShardTraining", spy)
    cal = est._timed(runs[:1], "cpu", 1, epochs=2)
    assert seen and all("curriculum" not in t for t in seen)
    assert "curriculum" in runs[0].spec["train"]        # the plan's own spec untouched
    assert cal.epoch_s > 0


# ---------------------------------------------------------------- --device cuda without a CUDA device

def test_a_flop_based_job_is_its_steps_at_the_rate_or_at_the_floor():
    from icl.plan.estimate import GPU_STEP_FLOOR_S, FlopCalibration
    cal = FlopCalibration(run_epoch_flops=4e12, steps_per_epoch=2, rate=50e12)
    # 16 runs: 2 steps of 16 x 2e12 FLOP = 0.64 s each, 300 epochs, 1.5 s start-up
    assert cal.seconds(16, 300, 10, 1.5) == pytest.approx(1.5 + 300 * 2 * 0.64)
    # a small step is no faster than the floor, whatever its FLOPs
    small = FlopCalibration(run_epoch_flops=1e6, steps_per_epoch=1, rate=50e12)
    assert small.seconds(8, 400, 4, 0.0) == pytest.approx(400 * GPU_STEP_FLOOR_S)
    # the LLC's SGLD steps: 3000 steps of half a training step's prompts, 16 runs (0.32 s each); a small one at the floor
    assert cal.seconds(16, 300, 10, 1.5, (3000, 0.5)) - cal.seconds(16, 300, 10, 1.5) == pytest.approx(3000 * 0.32)
    assert small.seconds(8, 400, 4, 0.0, (3000, 0.5)) - small.seconds(8, 400, 4, 0.0) == pytest.approx(3000 * GPU_STEP_FLOOR_S)


def _gpt_raw() -> dict:
    raw = copy.deepcopy(TINY)
    tiny = raw["experiments"]["tiny"]
    tiny.update(tokens={"kind": "gaussian", "d": 3, "covariance": "identity"}, task={"kind": "linear"},
                prompts={"N": 6, "train": 40, "test": 40},
                models=[{"name": "gpt", "kind": "gpt", "optimizer": "adam", "lr": 1e-3, "layers": 2, "heads": 2,
                         "width": 16, "positional": "none"}])
    tiny["train"] = {"epochs": 50, "log_every": 10, "checkpoint_every": 50, "fresh": True}   # CUDA's defaults
    tiny["sweep"] = {"seed": [0, 1]}
    return raw


@pytest.fixture(scope="module")
def gpt_cfg():
    return validate(_gpt_raw())


def test_the_flops_are_counted_on_the_runs_prompts_and_add_over_runs(gpt_cfg):
    """40 prompts an epoch are past 4 x SMALL: the line through the counts at SMALL and 4 x SMALL
    must give what counting on all 40 gives (an epoch's FLOPs are linear in its prompts), and two
    runs trained together count twice one run's (the ensemble's matmuls are the runs' own)."""
    from icl.plan.estimate import _counted, flop_calibrate
    members = shards(plan(gpt_cfg, "tiny"))
    (two,) = members.values()
    cal = flop_calibrate(two)
    assert cal.steps_per_epoch == 1 and cal.rate == 50e12         # tf32, CUDA's default precision
    assert cal.run_epoch_flops == pytest.approx(_counted(two[:1], None), rel=1e-9)
    assert _counted(two, None) == pytest.approx(2 * cal.run_epoch_flops, rel=1e-9)
    # by hand, per prompt of 2N + 1 = 13 tokens at width 16: a layer's dense matmuls are 2 x 12 W^2
    # FLOP a token and its attention 2 x 2 x 13 W; the forward lies between one such layer over every
    # token and two, and forward plus backward is about three forwards: a count without the backward
    # (~1/3) or of one run's share wrong by the runs falls outside
    layer = 13 * (2 * 12 * 16 ** 2 + 4 * 13 * 16)
    assert 3 * 40 * 13 * 2 * 12 * 16 ** 2 < cal.run_epoch_flops < 4 * 40 * 2 * layer


def test_the_flop_rate_is_that_of_the_precision_the_job_takes_on_cuda():
    """{cpu: float32, cuda: bf16}: the GPT's shard counts at bf16's rate, and the LSA's beside it,
    which bf16 leaves at CUDA's default, at tf32's."""
    from icl.plan.estimate import GPU_FLOP_RATE, flop_calibrate
    raw = _gpt_raw()
    tiny = raw["experiments"]["tiny"]
    tiny["models"].append({"name": "lsa", "kind": "lsa", "optimizer": "adam", "lr": 1e-2})
    tiny["train"]["precision"] = {"cpu": "float32", "cuda": "bf16"}
    tiny["sweep"] = {"seed": [0]}
    rates = {ms[0].spec["model"]["kind"]: flop_calibrate(ms).rate for ms in shards(plan(validate(raw), "tiny")).values()}
    assert rates == {"gpt": GPU_FLOP_RATE["bf16"], "lsa": GPU_FLOP_RATE["tf32"]}


def test_cuda_without_a_cuda_device_is_flop_based_and_says_so(gpt_cfg, tmp_path, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    rows = estimate(gpt_cfg, device="cuda")
    assert {r["basis"] for r in rows} == {"FLOPs"}
    assert {r["basis"] for r in estimate(gpt_cfg, device="cpu")} == {"timed"}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(gpt_cfg))
    if not _real_cuda():              # the command, in a process of its own, sees the machine's torch
        res = subprocess.run([sys.executable, "-m", "icl", "check", "--estimate", "--device", "cuda",
                              str(tmp_path / "g.yaml")], capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-2000:]
        assert "FLOP-based, not timed: torch sees no CUDA device here" in res.stdout
        assert "counting the FLOPs of an epoch of" in res.stderr


def _real_cuda() -> bool:
    return subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(torch.cuda.is_available())"]).returncode == 1


def test_the_device_is_decided_in_one_place():
    """--device, else the config's `device` (its schema default: auto), by one function; CUDA probed
    by one (runtime.cuda_here), which pick_device and the estimate's choice of FLOPs both ask."""
    from icl.jobs import runtime
    assert runtime.device_setting(None, {"device": "auto"}) == "auto"
    assert runtime.device_setting("cpu", {"device": "cuda"}) == "cpu"
    src = {p.name: p.read_text() for p in (Path(__file__).resolve().parent.parent / "icl").rglob("*.py")}
    probes = sorted(name for name, text in src.items() if "cuda.is_available" in text)
    assert probes == ["runtime.py"], probes
    assert not [name for name, text in src.items() if '.get("device"' in text]


def test_a_jobs_work_scales_with_its_runs_epochs_and_llc_steps(gpt_cfg):
    """The scheduler's priority (train_work): twice the runs or the epochs, twice the work; the LLC's
    SGLD steps add their epochs' worth; a wider GPT keeps more floats a step, so more work."""
    from icl.models import MODELS
    from icl.plan.estimate import llc_epochs, priorities, train_work, WORK_UNIT
    members = plan(gpt_cfg, "tiny")
    assert len(members) == 2
    spec = members[0].spec
    one = train_work(members[:1])
    assert train_work(members) == pytest.approx(2 * one)
    assert one == pytest.approx(50 * 40 * MODELS["gpt"].step_floats(spec))
    raw = _gpt_raw()
    raw["experiments"]["tiny"]["train"]["epochs"] = 100
    assert train_work(plan(validate(raw), "tiny")) == pytest.approx(4 * one)
    raw["experiments"]["tiny"]["train"]["llc"] = {"points": 4, "chains": 2, "draws": 20, "burnin": 10, "batch": 8}
    with_llc = plan(validate(raw), "tiny")
    extra = llc_epochs(with_llc[0].spec)
    assert extra > 0 and train_work(with_llc) == pytest.approx(4 * one * (100 + extra) / 100)
    raw["experiments"]["tiny"]["models"][0]["width"] = 32
    assert train_work(plan(validate(raw), "tiny")) > train_work(with_llc)
    (shard, p), = priorities(members).items()
    assert p == pytest.approx(1 + train_work(members) / WORK_UNIT, abs=0.005)
