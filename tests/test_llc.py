"""The LLC estimator (icl.train.llc) against what is known independently: a regular model's λ = d/2 and
the exact stationary law of SGLD on a quadratic; a singular loss, (w₁w₂)², against its tempered
posterior by quadrature (whose learning coefficient is ½); devinterp's SGLD and LLCEstimator
transcribed step for step; the chain check on chains that fail it; the stages read off λ̂(t); the
estimate inside a training job (an ensemble's run equals it alone, and a resumed job the unbroken one).
"""
import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from icl.train import llc
from icl.jobs.runtime import log_grid
from icl.tables.measures import LLC_STATUS
from icl.tables import stages as ST
from icl.settings import LLC
from test_train import tiny_plan  # noqa: F401  (the fixture)


def quadratic(a: torch.Tensor, c: torch.Tensor):
    """grad_fn of L_r(w) = a_r/2 |w − c_r|² for R runs (a (R,), c (R, d))."""
    R = len(a)

    def grad_fn(w, idx):
        C = w.shape[0] // R
        aa, cc = a.repeat(C)[:, None], c.repeat(C, 1)
        return 0.5 * (aa * (w - cc) ** 2).sum(1), aa * (w - cc)
    return grad_fn


def test_a_regular_model_has_half_its_dimension():
    """L = a/2 |w − c|² in d = 10 dimensions, each of 16 runs its own curvature a and minimum c, the
    chains started at c. The localised tempered posterior is Gaussian with precision p = nβa + γ,
    and SGLD's Euler step leaves a variance 1/(p(1 − εp/4)) a coordinate, so E[nβ L] is
    nβa/2 · d / (p(1 − εp/4)) exactly: every run's λ̂ within 4 of its standard errors of that, their
    mean within 4 standard errors of the mean, and, the step's bias taken out, all within 4 % of d/2
    (γ small)."""
    R, d = 16, 10
    a = torch.linspace(0.5, 2.0, R, dtype=torch.float64)
    c = torch.randn(R, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = LLC(points=1, chains=8, draws=2000, burnin=300, epsilon=1e-4, gamma=1.0, nbeta=1000.0)
    out = llc.sample(lambda C: quadratic(a, c), c.clone(), torch.zeros(R, dtype=torch.float64), 1000, s, torch.arange(R), 3)
    p = (s.nbeta * a + s.gamma).numpy()
    exact = s.nbeta * a.numpy() / 2 * d / (p * (1 - s.epsilon * p / 4))
    z = (out.llc - exact) / out.se
    assert np.all(np.abs(z) < 4), z
    assert abs(z.mean()) < 4 / math.sqrt(R)
    np.testing.assert_allclose(out.llc * (1 - s.epsilon * p / 4), d / 2, rtol=0.04)   # the step's bias taken out
    assert np.all(out.status == 0)


def _plateau_of(s, base, weak) -> tuple[float, object]:
    """icl.tables.measures.plateau of one checkpoint's two estimates (at γ and at γ × s.plateau)."""
    from icl.tables.measures import plateau
    sh = {"run_id": np.arange(len(base.llc)), "llc_status": base.status[:, None], "llc_llc": base.llc[:, None],
          "llc_se": base.se[:, None], "llc_plateau_status": weak.status[:, None],
          "llc_plateau_llc": weak.llc[:, None], "llc_plateau_se": weak.se[:, None]}
    got = plateau(sh)
    return got["llc_plateau_ratio"], got["llc_on_plateau"]


@pytest.mark.slow
def test_at_the_pipeline_s_settings_a_regular_model_reads_the_localisation_and_the_check_says_so():
    """Issue 63.2 at ldl_phase_diagram's estimator settings (2 chains × 60 draws after 30, γ = 100,
    ε = 10⁻³, nβ = m/log m with its minibatch m = 64: 15.4): a regular model of λ = d/2 = 2 whose
    curvature is a linear regression's on standardised inputs (a = 1) reads λ̂ ≈ nβa/2·d/p = 0.27 (the
    closed form of test_a_regular_model_has_half_its_dimension, p = nβa + γ), 14 % of λ: the
    localisation, not λ. The plateau check (the same estimate at γ/10, burn-in ×10) reads the closed
    form there too (1.22: 4.4-fold), and marks every run it can decide off its plateau, none on it.
    At γ = 0.1 (4 chains × 3000 draws) the same estimator reads λ within 10 %, and the check marks no
    run off its plateau (their mean ratio within 5 % of 1; one run's ±8 % cannot place it inside a
    10 % band: those read 'cannot tell')."""
    R, d = 32, 4
    a = torch.ones(R, dtype=torch.float64)
    c = torch.randn(R, d, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    nb = 64 / math.log(64)
    fn = lambda C: quadratic(a, c)          # noqa: E731
    closed = lambda s: nb / 2 * d / ((nb + s.gamma) * (1 - s.epsilon * (nb + s.gamma) / 4))   # noqa: E731
    zero = torch.zeros(R, dtype=torch.float64)
    pipe = LLC(points=10, chains=2, draws=60, burnin=30, epsilon=1e-3, gamma=100.0, nbeta=nb)
    base = llc.sample(fn, c.clone(), zero, 300, pipe, torch.arange(R), 0)
    weak = llc.sample(fn, c.clone(), zero, 300, pipe.plateau_check(), torch.arange(R), 1)
    assert abs(base.llc.mean() - closed(pipe)) < 0.05 and closed(pipe) < 0.15 * d / 2
    assert abs(weak.llc.mean() / closed(pipe.plateau_check()) - 1) < 0.15
    ratio, on = _plateau_of(pipe, base, weak)
    assert not on.fillna(False).any() and (~on.fillna(True)).sum() >= R // 4, (ratio, on)
    good = LLC(points=10, chains=4, draws=3000, burnin=400, epsilon=1e-3, gamma=0.1, nbeta=nb)
    base = llc.sample(fn, c.clone(), zero, 300, good, torch.arange(R), 0)
    weak = llc.sample(fn, c.clone(), zero, 300, good.plateau_check(), torch.arange(R), 1)
    np.testing.assert_allclose(base.llc.mean(), d / 2, rtol=0.1)
    ratio, on = _plateau_of(good, base, weak)
    assert not (~on.fillna(True)).any() and abs(np.nanmean(ratio) - 1) < 0.05, (ratio, on)


def singular_expectation(nbeta: float, gamma: float) -> float:
    """E[nβ (w₁w₂)²] under exp(−nβ w₁²w₂² − γ/2 |w|²), by quadrature: the w₂ integral in closed form
    (a Gaussian of precision 2nβw₁² + γ), the w₁ integral by the trapezoid rule on a grid dense at 0."""
    w = np.concatenate([np.geomspace(1e-12, 1e-3, 200001)[:-1], np.linspace(1e-3, 12 / math.sqrt(gamma), 400001)])
    a = nbeta * w * w + gamma / 2
    base = np.exp(-gamma / 2 * w * w)
    return float(np.trapezoid(base * nbeta * w * w * math.sqrt(math.pi) / (2 * a ** 1.5), w)
                 / np.trapezoid(base * np.sqrt(math.pi / a), w))


def test_a_singular_model_against_its_posterior_by_quadrature():
    """L = (w₁w₂)² at w* = 0, whose learning coefficient is ½ (multiplicity 2): at finite nβ the
    posterior expectation is ½ − O(1/log nβ) (so the quadrature rises toward ½ like it: 0.18, 0.35,
    0.41 at nβ/γ = 10², 10⁴, 10⁶), and λ̂ over 64 runs × 2 chains equals the quadrature's within
    4 standard errors (ε small enough that the step's bias is below them)."""
    vals = [singular_expectation(nb, 100.0) for nb in (1e4, 1e6, 1e8)]
    assert vals[0] < vals[1] < vals[2] < 0.5
    deficit = [(0.5 - v) * math.log(nb / 100.0) for v, nb in zip(vals, (1e4, 1e6, 1e8))]
    assert all(1.0 < x < 1.6 for x in deficit)          # ½ − λ̂ ≈ c / log(nβ/γ), c → 1

    def grad_fn(w, idx):
        w1, w2 = w[:, 0], w[:, 1]
        return (w1 * w2) ** 2, torch.stack([2 * w1 * w2 ** 2, 2 * w1 ** 2 * w2], 1)
    R = 64
    s = LLC(points=1, chains=2, draws=4000, burnin=500, epsilon=5e-5, gamma=100.0, nbeta=1e4)
    out = llc.sample(lambda C: grad_fn, torch.zeros(R, 2, dtype=torch.float64), torch.zeros(R, dtype=torch.float64),
                     10 ** 6, s, torch.arange(R), 0)
    est = out.per_chain.ravel()
    assert abs(est.mean() - vals[0]) < 4 * est.std() / math.sqrt(est.size)


def tiny_lsa(R: int = 3, dtype=torch.float64):
    """An LSA kind, its runs' parameters and a token-form batch of 12 prompts (d = 2, N = 6)."""
    from icl.models import LSA, token_batch
    m = LSA({"init_scale": 0.3, "init_noise": 0.05}, 2)
    params = m.init(list(range(R)), ["a"] * R, "cpu", dtype)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(R, 12, 7, 2, generator=g, dtype=dtype)
    w = torch.randn(R, 12, 2, generator=g, dtype=dtype)
    y = (x * w.unsqueeze(2)).sum(-1)
    return m, params, token_batch({"x": x, "y": y}.__getitem__, False, None)


def test_devinterp_step_for_step():
    """devinterp's SGLD (optim/sgld.py: dw = nβ∇L + γ(w − w₀); w += −ε/2·dw; w += √ε·ξ) and its
    sampler and LLCEstimator (slt/sampler.py, slt/llc.py: a draw is the minibatch loss at the
    weights the step starts from, after the burn-in; λ̂ per chain nβ(mean − init_loss)), as written
    there for one torch.nn.Module, one chain at a time, fed the ξ and minibatches of the run's
    stream: every run's every chain equals the ensemble's to float64 rounding."""
    from icl.train.streams import Stream
    m, params, batch = tiny_lsa()
    R, C, n = 3, 2, 12
    s = LLC(points=1, chains=C, draws=30, burnin=10, epsilon=1e-3, gamma=50.0, nbeta=None, batch=5)
    seeds = torch.tensor([4, 7, 9])
    out = llc.measure(m, params, batch, s, seeds, epoch=5)
    nbeta = llc.default_nbeta(5)
    for r in range(R):
        one = {k: v[r:r + 1] for k, v in batch.prompts.items()}
        w0 = {k: v[r:r + 1].clone() for k, v in params.items()}
        with torch.no_grad():
            init_loss = float(m.objective(m.predict(w0, llc.Batch(one))[0], llc.Batch(one))[0])
        for c in range(C):
            module = torch.nn.ParameterDict({k: torch.nn.Parameter(v.clone()) for k, v in w0.items()})
            initial = {k: v.detach().clone() for k, v in module.items()}
            losses = []
            for i in range(s.burnin + s.draws):
                st = Stream(seeds[r:r + 1], llc.STREAM_LLC + 5 * llc.STEPS + i)
                idx = (st.uniform(llc.MINIBATCH + c, (5,), torch.float64) * n).long().clamp_(max=n - 1)
                data = llc.Batch({k: v[:, idx[0]] for k, v in one.items()})
                loss = m.objective(m.predict(dict(module), data)[0], data)[0]
                losses_at = loss.detach()
                loss.backward()
                xi = st.normal(llc.NOISE + c, (sum(p.numel() for p in module.values()),), torch.float64)[0]
                with torch.no_grad():
                    at = 0
                    for k in w0:                     # the ensemble's flat order (a ParameterDict sorts its keys)
                        p = module[k]
                        dw = p.grad * nbeta
                        dw.add_(p.data - initial[k], alpha=s.gamma)
                        p.data.add_(dw, alpha=-0.5 * s.epsilon)
                        p.data.add_(xi[at:at + p.numel()].view_as(p), alpha=s.epsilon ** 0.5)
                        at += p.numel()
                if i >= s.burnin:
                    losses.append(losses_at.item())
                module.zero_grad()
            assert out.per_chain[r, c] == pytest.approx(nbeta * (np.mean(losses) - init_loss), rel=1e-9, abs=1e-9)


def test_a_runs_estimate_does_not_depend_on_the_runs_beside_it():
    m, params, batch = tiny_lsa(3)
    s = LLC(points=1, chains=2, draws=20, burnin=5, epsilon=1e-3, gamma=50.0, batch=4)
    seeds = torch.tensor([4, 7, 9])
    together = llc.measure(m, params, batch, s, seeds, epoch=2)
    alone = llc.measure(m, {k: v[1:2] for k, v in params.items()},
                        llc.Batch({k: v[1:2] for k, v in batch.prompts.items()}), s, seeds[1:2], epoch=2)
    np.testing.assert_allclose(together.per_chain[1], alone.per_chain[0], rtol=1e-10)
    other = llc.measure(m, params, batch, s, seeds, epoch=3)      # another checkpoint: other draws
    assert not np.allclose(together.draws, other.draws)
    one_by_one = llc.measure(m, params, batch, dataclasses.replace(s, together=1), seeds, epoch=2)
    np.testing.assert_allclose(one_by_one.per_chain, together.per_chain, rtol=1e-10)     # chains a pass: same draws


@pytest.mark.parametrize("case, status", [("stepped too far", 1), ("still relaxing", 2), ("downhill", 3)])
def test_the_chain_check_marks_what_it_must(case, status):
    """Chains that diverge (εp > 4: the Euler step amplifies), that have not reached their law (ε so
    small that 100 draws are a tenth of the relaxation time: their loss still climbs from w*'s) and that start
    on a slope (w* off the minimum: they find lower loss, λ̂ < 0) are unusable; the same chains run
    right pass (test_a_regular_model_has_half_its_dimension)."""
    R, d = 8, 10
    a = torch.linspace(0.5, 2.0, R, dtype=torch.float64)
    c = torch.randn(R, d, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    eps, burnin, start = {"stepped too far": (1e-2, 50, c.clone()), "still relaxing": (1e-6, 0, c.clone()),
                          "downhill": (1e-4, 100, c + 1.0)}[case]
    s = LLC(points=1, chains=4, draws=100, burnin=burnin, epsilon=eps, gamma=1.0, nbeta=1000.0)
    init = 0.5 * a * ((start - c) ** 2).sum(1)
    out = llc.sample(lambda C: quadratic(a, c), start, init, 1000, s, torch.arange(R), 0)
    assert np.all(out.status == status), (out.status, out.llc, out.drift_z)


def test_stages_are_the_turns_of_llc_past_its_noise():
    """λ̂(t) over 24 checkpoints, log-spaced: a rise, a fall and a rise (two critical points) with
    noise of the size real chains give; a monotone rise with the same noise (none); and turns
    smaller than twice the standard error (none), all at a swing of two standard errors."""
    t = np.array(log_grid(3000, 24))
    x = np.log10(t)
    rng = np.random.default_rng(0)
    se = np.full(len(t), 0.4)
    shape = np.interp(x, [0, 1.5, 2.5, 3.5], [2.0, 14.0, 6.0, 12.0])
    b = ST.boundaries(shape + rng.normal(0, 0.4, len(t)), se, t, 2.0)
    assert len(b) == 2 and 20 < b[0] < 60 and 200 < b[1] < 600, b
    assert ST.boundaries(2 + 3 * x + rng.normal(0, 0.4, len(t)), se, t, 2.0) == []
    assert ST.boundaries(5 + 0.3 * np.sin(4 * x), se, t, 2.0) == []
    assert ST.stages(np.array([1.0, np.nan, 2.0]), np.ones(3), np.array([1, 10, 100]), 4)[0] is None


def test_the_batched_filter_is_the_one_filter():
    """any_boundary (every null draw and swing at once) against boundaries, trace by trace."""
    rng = np.random.default_rng(1)
    t = np.array(log_grid(1300, 10))
    for _ in range(200):
        y, e = rng.normal(0, 1, len(t)).cumsum(), rng.uniform(0.05, 1.0, len(t))
        sw = np.array([0.5, 2.0, 6.0])
        got = ST.any_boundary(ST.smoothed(y[None], t), e[None], sw)[0]
        assert got.tolist() == [bool(ST.boundaries(y, e, t, s)) for s in sw]


# the pipeline's chain errors (ldl_phase_diagram: 10 checkpoints, standard errors 0.02-0.3 from 2 chains)
PIPE_T = np.array(log_grid(1300, 10))
PIPE_SE = np.geomspace(0.3, 0.02, 10)


@pytest.mark.parametrize("chains", [2, 4, 8])
def test_a_flat_llc_shows_a_boundary_in_at_most_five_percent_at_the_run_s_swing(chains):
    """Monte Carlo, independently of the null the swing was chosen on (another stream, the
    one-trace filter): flat λ̂ drawn with the run's chains and errors, the error re-estimated from
    the drawn chains, shows a boundary at the chosen swing in at most 5 % of 3000 draws (+ three
    binomial standard errors), and at the next smaller swing tried in more than 3 %: the swing is
    the null's, not a safe guess."""
    swing, rate = ST.null_swing(PIPE_SE, PIPE_T, chains, seed=7)
    assert np.isfinite(swing) and rate <= ST.NULL_RATE

    def false_rate(s, n=3000):
        rng = np.random.default_rng(99)
        hits = 0
        for _ in range(n):
            c = 5.0 + rng.standard_normal((len(PIPE_T), chains)) * PIPE_SE[:, None] * np.sqrt(chains)
            hits += bool(ST.boundaries(c.mean(1), c.std(1, ddof=1) / np.sqrt(chains), PIPE_T, s))
        return hits / n
    tol = 3 * np.sqrt(0.05 * 0.95 / 3000)
    assert false_rate(swing) <= ST.NULL_RATE + tol
    below = ST.SWINGS[ST.SWINGS < swing]
    if len(below):
        assert false_rate(below[-1]) > 0.03
    if chains == 2:      # a two-sample error is a poor guess: the null asks for far more than 2 errors
        assert swing > 4.0


def test_a_real_stage_is_found_past_its_null_and_noise_is_not():
    """Eight chains per checkpoint around a rise, a fall and a rise of λ̂: both turns are found at
    the run's own swing; the same chains around a flat λ̂ give none; a checkpoint whose estimate is
    negative (within its error, so the chain check passed it) never enters."""
    rng = np.random.default_rng(3)
    t = np.array(log_grid(3000, 24))
    x = np.log10(t)
    shape = np.interp(x, [0, 1.5, 2.5, 3.5], [2.0, 14.0, 6.0, 12.0])
    chains = shape[:, None] + rng.normal(0, 0.8, (len(t), 8))
    llc, se = chains.mean(1), chains.std(1, ddof=1) / np.sqrt(8)
    b, swing, rate = ST.stages(llc, se, t, 8, "r0")
    assert len(b) == 2 and 20 < b[0] < 60 and 200 < b[1] < 600 and rate <= ST.NULL_RATE, (b, swing)
    flat = 5.0 + rng.normal(0, 0.8, (len(t), 8))
    assert ST.stages(flat.mean(1), flat.std(1, ddof=1) / np.sqrt(8), t, 8, "r0")[0] == []
    neg = llc.copy()
    neg[5] = -0.05
    keep = np.arange(len(t)) != 5
    assert ST.stages(neg, se, t, 8, "r0")[0] == ST.boundaries(llc[keep], se[keep], t[keep], ST.stages(neg, se, t, 8, "r0")[1])
    assert ST.stages(llc, se, t, 1, "r0")[0] is None            # one chain: no error, no null


def test_a_training_job_measures_it_and_resumes_to_the_same(tiny_plan):
    """train.llc in a training job: llc_* arrays at the log grid's checkpoints; every run of the
    ensemble equals itself trained alone; a job killed after a checkpoint resumes to the unbroken
    job's numbers; llc.parquet and the summary's stages from them."""
    from test_train import _members, resumed_after_kill
    from icl.tables.measures import summary_table
    from icl.tables.build import llc_table
    from icl.train.loop import train_shard
    recs, paths, tmp = tiny_plan
    members = copy.deepcopy(_members(recs, "softmax_q"))
    for r in members:
        r["spec"]["train"]["llc"] = {"points": 4, "chains": 2, "draws": 20, "burnin": 10, "epsilon": 1e-3,
                                     "gamma": 100.0, "batch": 8}
    ref = train_shard(members, paths, str(tmp / "ref.npz"))
    assert list(ref["llc_epoch"]) == log_grid(12, 4) == [1, 2, 5, 12]
    assert ref["llc_per_chain"].shape == (len(members), 4, 2) and (ref["llc_status"] >= 0).all()
    alone = train_shard(members[1:2], paths, str(tmp / "one.npz"))
    np.testing.assert_allclose(alone["llc_per_chain"][0], ref["llc_per_chain"][1], rtol=1e-4)
    res = resumed_after_kill(members, paths, str(tmp / "res.npz"), at=7)
    for k in ref:
        if k.startswith("llc_"):
            np.testing.assert_array_equal(res[k], ref[k], err_msg=k)
    table = llc_table(ref).to_pandas()
    assert len(table) == len(members) * 4 and set(table["status"]) <= set(LLC_STATUS.values())
    summ = summary_table(ref)
    assert summ["llc_usable"].notna().all() and "llc_boundaries" in summ


def test_the_report_draws_llc_and_counts_where_the_instruments_agree():
    """The figure: one panel per setting (its lowest seed), nothing without usable estimates; the
    table: per setting each instrument's counts and the runs where they agree."""
    import pandas as pd
    from icl.report.llc import agreement_table, hoogland_note, llc_figure
    runs = pd.DataFrame({"run_id": [f"r{i}" for i in range(6)], "model": "sq", "seed": [0, 1, 2] * 2,
                         "L": [0.2] * 3 + [2.0] * 3})
    epochs = log_grid(400, 8)
    rng = np.random.default_rng(0)
    llc_rows = pd.DataFrame([{"run_id": r, "epoch": e, "llc": 1 + rng.normal(0, 0.1), "llc_se": 0.1}
                             for r in runs["run_id"] for e in epochs])
    curves = pd.DataFrame([{"run_id": r, "epoch": e, "metric": "train_loss", "value": 1.0 / e}
                           for r in runs["run_id"] for e in range(1, 401, 4)])
    summary = pd.DataFrame({"run_id": runs["run_id"], "llc_stages": pd.array([1, 2, 2, 3, 3, 1], dtype="Int64"),
                            "n_phases": pd.array([2, 2, 2, 3, 3, None], dtype="Int64"), "llc_usable": 8,
                            "llc_boundaries": [[], [20], [20], [5, 50], [5, 50], []],
                            "phase_ends": [[30], [30], [30], [4, 40], [4, 40], []]})
    assert llc_figure(llc_rows, curves, runs, summary) is not None
    assert llc_figure(llc_rows.assign(llc=np.nan), curves, runs, summary) is None
    table = agreement_table(runs, summary).set_index("setting")
    assert table.loc["L=0.2", "agree"] == "2 of 3" and table.loc["L=2", "agree"] == "2 of 2"
    assert table.loc["L=2", "LLC stages (stages: runs)"] == "1: 1, 3: 2"
    note = hoogland_note(runs, summary, nonlinear=True, linear_task=True)
    assert "five stages" in note and "8 usable checkpoints" in note and "Order" not in note
    escaped = summary.assign(t_escape=pd.array([None, 30, 10, 100, 2, None], dtype="Int64"))
    assert "in 2 of the 4 runs that have both" in hoogland_note(runs, escaped, nonlinear=True, linear_task=True)
    assert hoogland_note(runs, summary, nonlinear=True, linear_task=False) == ""


def test_train_llc_is_typed_validated_and_cut_by_smoke():
    from conftest import TINY
    from icl.config import validate
    from icl.jobs.errors import ConfigError
    raw = copy.deepcopy(TINY)
    raw["experiments"]["tiny"]["train"]["llc"] = {"points": 5, "batch": 8}
    tr = validate(raw)["experiments"]["tiny"]["train"]
    s = LLC.of(tr["llc"])
    assert (s.points, s.chains, s.draws, s.burnin, s.epsilon, s.gamma, s.nbeta, s.batch) == (5, 4, 200, 100, 1e-3, 100.0, None, 8)
    smoke = validate({**raw, "smoke": True})["experiments"]["tiny_smoke"]["train"]["llc"]
    assert (smoke["points"], smoke["chains"], smoke["draws"], smoke["burnin"], smoke["batch"]) == (2, 2, 4, 2, 4)
    assert smoke["plateau"] == 0.5 and LLC.of(smoke).plateau_check().burnin == 4     # the check kept, short
    raw["experiments"]["tiny"]["train"]["llc"]["plateau"] = 0                      # none asked: none added
    assert validate({**raw, "smoke": True})["experiments"]["tiny_smoke"]["train"]["llc"]["plateau"] == 0
    raw["experiments"]["tiny"]["train"]["llc"].pop("plateau")
    raw["experiments"]["tiny"]["train"]["llc"] = {"points": 5, "chain": 3}
    with pytest.raises(ConfigError, match="chain"):
        validate(raw)


def test_the_memory_estimate_counts_the_chains():
    """An SGLD step holds every chain's activations on its minibatch and their weights: a GPT's
    estimate grows with train.llc's chains x batch past the training step's batch."""
    from conftest import TINY
    from icl.config import validate
    from icl.models import MODELS
    from icl.plan.shards import plan
    raw = copy.deepcopy(TINY)
    spec = plan(validate(raw), "tiny")[0].spec
    kind = MODELS[spec["model"]["kind"]]
    base = kind.train_bytes(spec)
    spec["train"]["llc"] = {"points": 3, "chains": 8, "draws": 10, "burnin": 5, "epsilon": 1e-3, "gamma": 100.0}
    assert kind.train_bytes(spec) > base
    spec["train"]["llc"]["chains"] = 1
    assert base <= kind.train_bytes(spec) < kind.train_bytes({**spec, "train": {**spec["train"], "llc": {**spec["train"]["llc"], "chains": 8}}})


@pytest.mark.parametrize("kind", ["gpt", "transformer_block", "softmax_q"])
def test_every_kind_measures_its_llc(kind):
    """The estimator runs on every kind through its own `step` (C x R rows): finite draws, an estimate
    per run and chain, and the runs beside each other independent of it (a run alone equals itself
    in the ensemble)."""
    from icl.models import MODELS, token_batch
    settings = {"gpt": {"width": 8, "layers": 2, "heads": 2, "ffn_mult": 2, "positional": "learned", "positions": 16},
                "transformer_block": {"width": 8}, "softmax_q": {}}[kind]
    m = MODELS[kind](settings, 3)
    params = m.init([0, 1], [kind, kind], "cpu")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 10, 7, 3, generator=g)
    y = (x * torch.randn(2, 10, 1, 3, generator=g)).sum(-1)
    batch = token_batch({"x": x, "y": y}.__getitem__, False, None)
    s = LLC(points=1, chains=2, draws=6, burnin=2, epsilon=1e-4, gamma=100.0, batch=4)
    out = llc.measure(m, params, batch, s, torch.tensor([3, 8]), epoch=1)
    assert out.per_chain.shape == (2, 2) and np.isfinite(out.draws).all()
    alone = llc.measure(m, {k: v[1:] for k, v in params.items()}, llc.Batch({k: v[1:] for k, v in batch.prompts.items()}),
                        s, torch.tensor([8]), epoch=1)
    np.testing.assert_allclose(alone.draws[0], out.draws[1], rtol=1e-4, atol=1e-6)
