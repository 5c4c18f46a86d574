"""icl timing sums the Snakemake benchmark files of the jobs an experiment has now: after a sweep
changed, logs/ still holds the files of shards the plan no longer has (zfb_gpt going from five seeds
to seven left three), and summing them counted jobs that no longer exist."""
import json
import subprocess
import sys

import pytest

from icl.jobs.timing import benchmark_files, benchmark_table, timing_table

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def _bench(path, seconds, rss=554.1, pss=324.8):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + f"{seconds}\t0:00:{int(seconds) % 60:02d}\t{rss}\t5192.2\t208.3\t{pss}\t0.00\t0.02\t99.1\t{seconds}\n")


@pytest.fixture
def logs(tmp_path):
    """The default run's zfb_gpt after its sweep changed (2026-11-27): the two GPT shards and the LSA
    shard it plans now, and the three of the five-seed plan before it, with their measured seconds."""
    b = tmp_path / "logs/zfb_gpt/benchmark"
    now = {"gpt-661476127d": 122.01, "gpt-c91cac1d22": 247.63, "lsa-4798a08c35": 8.36}
    before = {"gpt-697c8d5613": 94.73, "gpt-75de5b172b": 192.80, "lsa-a81030e339": 8.25}
    for shard, sec in {**now, **before}.items():
        _bench(b / "train" / f"{shard}.tsv", sec)
        _bench(b / "evaluate" / f"{shard}.tsv", sec / 20)
    _bench(b / "plan.tsv", 0.53)
    _bench(b / "tables.tsv", 0.73)
    runs = [{"run_id": f"{s}-{i}", "shard": s} for s in now for i in range(3)]
    (tmp_path / "results/zfb_gpt").mkdir(parents=True)
    (tmp_path / "results/zfb_gpt/plan.json").write_text(json.dumps({"experiment": "zfb_gpt", "runs": runs}))
    return tmp_path, now, before


def test_timing_sums_the_jobs_the_plan_has_now(logs):
    tmp, now, before = logs
    df = timing_table(str(tmp / "logs"), results=str(tmp / "results")).set_index("step")
    assert df.loc["train", "jobs"] == 3 and df.loc["train", "seconds"] == pytest.approx(sum(now.values()))
    assert df.loc["evaluate", "jobs"] == 3 and df.loc["plan", "jobs"] == 1 and df.loc["tables", "seconds"] == 0.73
    stale = benchmark_files(str(tmp / "logs"), results=str(tmp / "results"))[1]
    assert sorted(p.rsplit("/", 1)[-1] for p in stale) == sorted(f"{s}.tsv" for s in before for _ in (0, 1))
    # without a plan (logs copied alone) every file counts, as before
    everything = timing_table(str(tmp / "logs"), results=str(tmp / "nowhere")).set_index("step")
    assert everything.loc["train", "seconds"] == pytest.approx(sum(now.values()) + sum(before.values()))


def test_the_command_says_what_it_left_out(logs):
    tmp, now, _ = logs
    out = subprocess.run([sys.executable, "-m", "icl", "timing"], cwd=tmp, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"{sum(now.values()):.1f} s training jobs" in out.stdout
    assert "left out: 6 benchmark files of shards the plans no longer have" in out.stdout


def test_a_benchmark_folder_is_read_as_its_files_and_a_wrong_path_is_named(logs):
    """icl report --benchmarks takes the files Snakemake passes, or the folder a person types."""
    tmp, _, _ = logs
    folder = tmp / "logs/zfb_gpt/benchmark"
    files = sorted(str(p) for p in folder.rglob("*.tsv"))
    assert benchmark_table([str(folder)]).equals(benchmark_table(files))
    assert benchmark_table([str(folder)])["jobs"].sum() == len(files)
    with pytest.raises(RuntimeError, match="results/zfb_gpt/plan.json: not a Snakemake benchmark file"):
        benchmark_table([str(tmp / "results/zfb_gpt/plan.json")])
