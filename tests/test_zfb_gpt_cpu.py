"""config/zfb_gpt_cpu.yaml: ZFB §5's grid scaled to a CPU plans as the seed's figure needs it
(two training laws x three N, learned and no positions, 3 seeds, tests to M = 2N on the identity
and on random covariances at c = 1, 4, 9), and runs end to end under `smoke=true` (-m slow)."""
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from icl.config import load
from icl.plan.shards import plan

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "config" / "zfb_gpt_cpu.yaml"
COMMAND = ".venv/bin/snakemake --cores 2 --configfile config/zfb_gpt_cpu.yaml"


def test_the_grid_is_the_seeds_scaled_down():
    cfg = load(str(CONFIG))
    runs = plan(cfg, "zfb_gpt_cpu")
    gpt = [r.spec for r in runs if r.spec["model"]["kind"] == "gpt"]
    assert {(s["tokens"]["kind"], s["prompts"]["N"], s["model"]["positional"]) for s in gpt} == \
        {(k, N, p) for k in ("gaussian", "random_covariance") for N in (10, 20, 30) for p in ("learned", "none")}
    assert len(gpt) == 2 * 3 * 2 * 3
    ev = cfg["experiments"]["zfb_gpt_cpu"]["evaluate"]
    assert max(ev["lengths"]) == 2 * 30
    assert {(s["kind"], tuple(s.get("c", []))) for s in ev["shifts"]} >= {("identity", ()), ("random_covariance", (1, 4, 9))}
    assert all(s["model"]["positions"] >= 2 * 60 + 1 for s in gpt if s["model"]["positional"] == "learned")


def test_the_readme_and_the_config_show_the_command():
    assert COMMAND in CONFIG.read_text()


@pytest.mark.slow
def test_smoke_run_draws_the_seeds_figure(tmp_path):
    shutil.copytree(REPO / "config", tmp_path / "config")
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    argv = (COMMAND + " --config smoke=true").split()
    argv[0] = str(Path(sys.executable).parent / "snakemake")
    res = subprocess.run([*argv, "-s", str(REPO / "Snakefile")], cwd=tmp_path, capture_output=True, text=True,
                         timeout=2700)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    shift = pd.read_parquet(tmp_path / "results" / "zfb_gpt_cpu_smoke" / "shift.parquet")
    assert set(shift["shift"]) >= {"none", "identity", "random_covariance"}
    html = (tmp_path / "reports" / "zfb_gpt_cpu_smoke.html").read_text()
    panels = set()
    from icl.report.figures import page_csvs
    for text in page_csvs(html).values():
        panels |= set(pd.read_csv(io.StringIO(text))["panel"].astype(str))
    for law in ("gaussian", "random_covariance"):      # the seed's 2 x 3 panels
        for N in (10, 20, 30):
            assert any(p.startswith(f"trained on {law}") and p.endswith(f"N={N}") for p in panels), (law, N, panels)
