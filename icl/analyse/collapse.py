"""The one collapse clock, measured: clock.parquet (a row per run) and collapse.parquet (a row per clock).

For softmax_q under full-batch GD on noise-free, orthogonal features of one norm and labels whose
covariance at the features is aI + b·11ᵀ (theory.parquet's `one_clock`), the label differences'
covariance is D = (s/2)·D₁ with s = E[(f(v_k) − f(v_k'))²] and D₁[k, n, m] = δ_nm − δ_nk − δ_mk + 1,
and a GD step moves the scores by −η‖v‖⁴·∂L/∂S: the balanced flow at a run's own step is one
universal flow (features I, D₁) stepped by the run's clock_per_epoch = η‖v‖⁴s per epoch, and its
continuous limit is one curve in τ = t·clock_per_epoch per K and p. So the analysis integrates
that flow itself, every epoch, from K, p and the step alone (`universal_flows`), and measures,
per run (clock.parquet): its time on the clock to half of uniform attention's loss (τ = T·clock),
the same on the balanced flow at its own step, on its sampled-count flow (theory_curves) and on
the continuous flow, and the three departures they separate: the step's (own-step flow against
the continuous one), the counts' (sampled-count flow against the balanced one) and what neither
explains (the run against its sampled-count flow: its finite task functions). Per clock (one
model, K and p; collapse.parquet): how far the runs' loss and own attention sit apart in rescaled
time, between settings at one seed and between seeds at one setting.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from icl.analyse.fits import exclude, probs_of
from icl.models import kinds
from icl.tables.measures import crossing_time
from icl.theory.ldl import diff_cov

TCOL = "t_unif_5e-1"     # the crossing on the clock: half of uniform attention's loss (the flows start there)
LEVEL = 0.5
CONTINUOUS_STEPS = 4000  # steps of the continuous flow to its crossing: its step's own error is < 1e-3 relative
FLOOR = 1e-1             # the collapse is compared over the loss's first decade (the median relative loss above this):
                         # later, each run's own finite task draws set its floor and rate (clock.parquet's run_departure)
GRID = 200               # points of the common τ grid (log-spaced)
SETTING_COLS = ("L", "c", "delta", "N", "lr")
DRAW_COLS = ("seed", "N", "M")   # what fixes a run's prompts: settings are compared on the same draws
CLOCK_COLUMNS = ["run_id", "model", "clock_per_epoch", "tau", "tau_flow", "tau_sampled", "tau_continuous",
                 "step_departure", "count_departure", "run_departure"]
COLLAPSE_COLUMNS = ["model", "K", "probs", "runs", "settings", "seeds", "tau_lo", "tau_hi", "loss_settings",
                    "attn_settings", "loss_seeds", "attn_seeds", "tau_median", "tau_min", "tau_max",
                    "step_departure_max", "count_departure_max", "run_departure_max"]


_UNIVERSAL: dict = {}        # universal_flows' results this process has integrated (claims re-ask the same)


def universal_flows(K: int, p: np.ndarray, steps: np.ndarray, epochs: int) -> tuple[np.ndarray, np.ndarray]:
    """Loss over its start and own attention (R, epochs + 1) of the balanced flow stepped by each of
    `steps` clock units per epoch: features I_K and labels of covariance I/2 (so s = 1 and the step
    is the clock's), queries in proportion p; icl.theory.flows.count_flows integrates it every epoch.

    With I_K as features a query's prompt moves only its own row of logits, so at uniform p every
    query's prompt follows the same path (the features are exchangeable): one prompt, weighted 1/K,
    gives the whole flow at a K-th of the cost (tests/test_clock.py holds the two equal). Each flow is
    integrated once per process: the claims of a setting ask for the same flows many times."""
    from icl.theory.flows import count_flows     # numba, compiled once per process: only where a clock is measured
    steps = np.asarray(steps, float)
    p = np.asarray(p, float) / np.sum(p)
    key = (int(K), p.tobytes(), steps.tobytes(), int(epochs))
    if key not in _UNIVERSAL:
        R = len(steps)
        queries = [0] if np.allclose(p, 1.0 / K, rtol=0, atol=1e-15) else range(K)
        G = np.broadcast_to(np.eye(K), (R, K, K))
        D = np.broadcast_to(diff_cov(np.eye(K) / 2.0), (R, K, K, K))
        counts = np.broadcast_to(np.tile(p, (len(queries), 1)), (R, len(queries), K))
        query = np.broadcast_to(np.asarray(queries), (R, len(queries)))
        loss, own = count_flows(G, D, counts, query, np.broadcast_to(p[list(queries)], (R, len(queries))), steps,
                                int(epochs))
        if len(_UNIVERSAL) > 64:
            _UNIVERSAL.clear()
        _UNIVERSAL[key] = (loss / loss[:, :1], own)
    loss, own = _UNIVERSAL[key]
    return loss.copy(), own.copy()


def flow_times(g: pd.DataFrame, tcol: str) -> np.ndarray | None:
    """Per run of `g` (one K and p, on one clock), the epoch at which the balanced flow at its own
    step crosses what `tcol` reads on the run, every epoch: t_rel_x and t_unif_x the flow's loss at x
    of its start (uniform attention's loss, the run's loss₀ at zero init), t_abs_x its loss at x/loss₀
    of its start, t_phase_one its own attention at 1/(1 + δ), δ = sqrt(20K/N). NaN where the flow
    does not cross within the run's epochs; None for a column the flow cannot read."""
    prefix = tcol.rsplit("_", 1)[0]
    if prefix not in ("t_rel", "t_unif", "t_abs") and tcol != "t_phase_one":
        return None
    clock = g["clock_per_epoch"].astype(float).to_numpy()
    epochs = int(g["epochs"].max())
    steps, inv = np.unique(clock, return_inverse=True)
    loss, own = universal_flows(int(g["K"].iloc[0]), probs_of(g), steps, epochs)
    if tcol == "t_phase_one":
        series, level = own, 1.0 / (1.0 + np.sqrt(20.0 * g["K"].astype(float).to_numpy() / g["N"].astype(float).to_numpy()))
    else:
        x = float(tcol.rsplit("_", 1)[-1])
        series, level = loss, (x / g["loss0"].astype(float).to_numpy() if prefix == "t_abs" else np.full(len(g), x))
    out = np.full(len(g), np.nan)
    for i, (row, lv) in enumerate(zip(inv, level)):
        y = series[row] if tcol == "t_phase_one" else -np.log(np.clip(series[row], 1e-300, None))
        target = lv if tcol == "t_phase_one" else -np.log(lv)
        hit = np.flatnonzero(y >= target)           # rising: own attention, or −log of the falling loss
        if len(hit):
            j = int(hit[0])
            a, b = y[max(j - 1, 0)], y[j]
            out[i] = float(j) if j == 0 or b == a else j - 1 + (target - a) / (b - a)
    return np.where(out <= g["epochs"].astype(float).to_numpy(), out, np.nan)     # within each run's own epochs


def continuous_tau(K: int, p: np.ndarray, level: float = LEVEL) -> float:
    """τ at which the continuous balanced flow falls to `level` of its start: the flow at a step small
    enough that its discreteness moves τ by under 1e-3 (two step sizes agree to that)."""
    guess = 2.0 * K * np.log(max(K, 2)) * max(1.0, np.log(1.0 / level) / np.log(2.0))
    for _ in range(6):
        step = guess / CONTINUOUS_STEPS
        loss, _ = universal_flows(K, p, np.array([step, step / 2]), 2 * CONTINUOUS_STEPS)
        t = crossing_time(loss, np.arange(loss.shape[1], dtype=float), level).to_numpy(float, na_value=np.nan)
        if np.isfinite(t).all() and t[0] * step < guess:
            return float(t[1] * step / 2)
        guess *= 4
    return float("nan")


def _clock_runs(tabs: dict) -> pd.DataFrame:
    """The runs on one clock: a mean-field kind under GD on data where theory's one_clock holds,
    trained (icl.analyse.fits.exclude)."""
    runs = tabs["runs"]
    if "one_clock" not in tabs["theory"] or runs.empty:
        return pd.DataFrame()
    df = runs.merge(tabs["summary"], on="run_id").merge(tabs["theory"], on="run_id")
    df = df[df["model_kind"].isin(kinds("mean_field")) & (df["optimizer"] == "gd")
            & df["one_clock"].fillna(False).astype(bool) & (df["clock_per_epoch"].astype(float) > 0)]
    return exclude(df)[0] if len(df) else df


def _sampled_tau(tc: pd.DataFrame, g: pd.DataFrame) -> pd.Series:
    """The sampled-count flow's time to half its start per run (theory_curves, on its logged epochs), in epochs."""
    m = tc[(tc["metric"] == "mean_field_loss_sampled") & tc["run_id"].isin(g["run_id"])] if len(tc) else tc
    if m is None or m.empty:
        return pd.Series(np.nan, index=g["run_id"])
    wide = m.pivot_table(index="run_id", columns="epoch", values="value", aggfunc="first")
    ep = wide.columns.to_numpy(float)
    v = wide.to_numpy(float)
    t = crossing_time(v / v[:, :1], ep, LEVEL).to_numpy(float, na_value=np.nan)
    return pd.Series(t, index=wide.index).reindex(g["run_id"])


def clock_tables(tabs: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """clock.parquet and collapse.parquet of an experiment's tables (empty where no run is on one clock)."""
    df = _clock_runs(tabs)
    rows, groups = [], []
    if df.empty:                       # no run on one clock, or tables made before theory.parquet had one_clock
        return pd.DataFrame(columns=CLOCK_COLUMNS), pd.DataFrame(columns=COLLAPSE_COLUMNS)
    probs_key = df["probs"].astype(object).where(df["probs"].notna(), "") if "probs" in df else \
        pd.Series("", index=df.index, dtype=object)
    for (model, K, pk), g in df.groupby([df["model"].astype(str), df["K"].astype(int), probs_key.astype(str)],
                                        sort=True, dropna=False):
        p = probs_of(g)
        clock = g["clock_per_epoch"].astype(float).to_numpy()
        t_flow = flow_times(g, TCOL)
        tau_c = continuous_tau(int(K), p)
        t_smp = g[f"flow_{TCOL}_sampled"].astype(float).to_numpy() if f"flow_{TCOL}_sampled" in g else \
            _sampled_tau(tabs["theory_curves"], g).to_numpy(float)         # tables before it: on the logged epochs
        T = g[TCOL].astype(float).to_numpy() if TCOL in g else np.full(len(g), np.nan)
        c = pd.DataFrame({"run_id": g["run_id"].to_numpy(), "model": model, "clock_per_epoch": clock,
                          "tau": T * clock, "tau_flow": t_flow * clock, "tau_sampled": t_smp * clock,
                          "tau_continuous": tau_c})
        with np.errstate(divide="ignore", invalid="ignore"):
            c["step_departure"] = np.log(c["tau_flow"] / c["tau_continuous"])
            c["count_departure"] = np.log(c["tau_sampled"] / c["tau_flow"])
            c["run_departure"] = np.log(c["tau"] / c["tau_sampled"])
        rows.append(c)
        groups.append({"model": model, "K": int(K), "probs": pk or None,
                       **_spread(tabs["curves"], g), **_tau_summary(c)})
    if not rows:
        return pd.DataFrame(columns=CLOCK_COLUMNS), pd.DataFrame(columns=COLLAPSE_COLUMNS)
    return (pd.concat(rows, ignore_index=True)[CLOCK_COLUMNS],
            pd.DataFrame(groups).reindex(columns=COLLAPSE_COLUMNS))


def _tau_summary(c: pd.DataFrame) -> dict:
    tau = c["tau"].dropna()
    mx = lambda col: float(c[col].abs().max()) if c[col].notna().any() else np.nan   # noqa: E731
    return {"tau_median": float(tau.median()) if len(tau) else np.nan,
            "tau_min": float(tau.min()) if len(tau) else np.nan, "tau_max": float(tau.max()) if len(tau) else np.nan,
            "step_departure_max": mx("step_departure"), "count_departure_max": mx("count_departure"),
            "run_departure_max": mx("run_departure")}


def _spread(curves: pd.DataFrame, g: pd.DataFrame) -> dict:
    """How far the runs `g` sit apart in rescaled time τ = epoch·clock_per_epoch: each run's log(loss/loss₀)
    and own attention on a common log grid of τ, over the τ it was logged at (its first logged epoch
    after 0 to its last; never extrapolated), and where the median loss is above FLOOR of its start;
    at each τ the spread (max − min) between the settings on one draw of the prompts (one seed, N and
    number of prompts: L, c, Δ and the step differ) that cover it, its largest value the draw's
    figure, and the median over draws; likewise between the seeds at one setting (median over
    settings). Settings that change the prompts (N) are compared only through the seeds' spread and
    the counts' departure (clock.parquet). Loss spreads are relative differences, exp(spread) − 1. NaN where no two
    settings (seeds) overlap in τ: a sweep whose clock rates differ more than its epochs span."""
    cols = [col for col in SETTING_COLS if col in g and g[col].nunique() > 1]
    setting = g[cols].astype(str).agg("|".join, axis=1) if cols else pd.Series("", index=g.index)
    draw = g[[c for c in DRAW_COLS if c in g]].astype(str).agg("|".join, axis=1)     # runs on the same prompts
    info = pd.DataFrame({"run_id": g["run_id"].to_numpy(), "setting": setting.to_numpy(), "seed": draw.to_numpy(),
                         "clock": g["clock_per_epoch"].astype(float).to_numpy(),
                         "loss0": g["loss0"].astype(float).to_numpy()}).set_index("run_id")
    out = {"runs": len(g), "settings": int(info["setting"].nunique()), "seeds": int(g["seed"].nunique()),
           "tau_lo": np.nan, "tau_hi": np.nan, "loss_settings": np.nan, "attn_settings": np.nan,
           "loss_seeds": np.nan, "attn_seeds": np.nan}
    cur = curves[curves["run_id"].isin(info.index) & curves["metric"].isin(["train_loss", "attn_own"])]
    cur = cur[cur["epoch"] > 0]
    if cur.empty:
        return out
    cur = cur.assign(tau=cur["epoch"].astype(float) * info.loc[cur["run_id"], "clock"].to_numpy())
    grid = np.geomspace(float(cur["tau"].min()), float(cur["tau"].max()), GRID)
    wide = {}
    for metric in ("train_loss", "attn_own"):
        vals = {}
        for rid, r in cur[cur["metric"] == metric].sort_values("epoch").groupby("run_id"):
            t, y = r["tau"].to_numpy(float), r["value"].to_numpy(float)
            if metric == "train_loss":
                y = np.log(np.clip(y / info.loc[rid, "loss0"], 1e-300, None))
            vals[rid] = np.where((grid >= t[0]) & (grid <= t[-1]), np.interp(grid, t, y), np.nan)
        if vals:
            wide[metric] = pd.DataFrame(vals).T
    if "train_loss" in wide:
        keep = (wide["train_loss"].median(axis=0) >= np.log(FLOOR)).to_numpy()
        wide = {k: v.loc[:, keep] for k, v in wide.items()}
    spans = []
    for metric, w in wide.items():
        name = "loss" if metric == "train_loss" else "attn"
        key = info.loc[w.index]
        for stat, by, across in (("settings", "seed", "setting"), ("seeds", "setting", "seed")):
            figs = []
            for _, part in w.groupby(key[by].to_numpy()):
                labels = key.loc[part.index, across].to_numpy()
                per = part.groupby(labels).median()          # one curve per setting (seed): the rows it has
                cover = per.notna().sum(axis=0) >= 2
                if cover.any():
                    figs.append(float((per.max(axis=0) - per.min(axis=0))[cover].max()))
                    spans.append(np.asarray(per.columns[cover.to_numpy()], int))     # the grid's indices compared
            if figs:
                med = float(np.median(figs))
                out[f"{name}_{stat}"] = float(np.expm1(med)) if name == "loss" else med
    if spans:
        covered = np.concatenate(spans)
        out["tau_lo"], out["tau_hi"] = float(grid[int(covered.min())]), float(grid[int(covered.max())])
    return out


MAX_EPOCHS = 1 << 20     # a flow that has not reached its accuracy by then is reported as never reaching it


def sampled_flow_time(K: int, p: np.ndarray, step: float, N: int, prompts: int, seed: int, level: float) -> float:
    """Epochs at which the sampled-count flow falls to `level` of its start (uniform attention's
    loss) at `step` clock units per epoch, on `prompts` prompts whose context counts are drawn
    multinomially at N tokens (queries drawn in proportion p, the same at every N), fixed by the seed: the theory's
    own dynamics at a size no run of a CPU's reaches (N ≥ 20K³), in the universal form of one clock
    (features I_K, labels of covariance I/2). NaN where it has not reached the level by MAX_EPOCHS."""
    from icl.theory.flows import count_flows
    p = np.asarray(p, float) / np.sum(p)
    query = np.random.default_rng([int(seed), int(K)]).choice(K, size=int(prompts), p=p)    # the same at every N
    counts = np.random.default_rng([int(seed), int(K), int(N)]).multinomial(int(N), p, size=int(prompts)).astype(float)
    D = diff_cov(np.eye(K) / 2.0)
    epochs = 256
    while epochs <= MAX_EPOCHS:
        loss, _ = count_flows(np.eye(K)[None], D[None], counts[None], query[None], np.full((1, prompts), 1.0 / prompts),
                              np.array([float(step)]), epochs)
        t = crossing_time(loss / loss[:, :1], np.arange(epochs + 1, dtype=float), level).to_numpy(float, na_value=np.nan)
        if np.isfinite(t[0]):
            return float(t[0])
        epochs *= 4
    return float("nan")
