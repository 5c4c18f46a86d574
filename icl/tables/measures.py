"""Per-run measurements of the training dynamics, made once by the tables step from a shard's
arrays and stored in summary.parquet: crossing times of loss thresholds and the own attention
there, phases (icl.tables.phases), the end of Phase I, final attention, divergence, memorisation and
the dynamics of softmax_q's feature logits. Everything that depends on time is measured on the
trace, the values of every epoch (icl.train.logs.Trace), so it does not depend on `log_every`;
shards written before the trace existed fall back to the logged epochs. The claims
(icl.analyse.claims) read these columns; they never recompute them.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd

from icl.tables.stages import stages
from icl.tables.phases import MAX_PHASES, choose, fit, logit, noise_level, phase_window, spread
from icl.theory.ldl import delta_conc

REL_THRESHOLDS = (1e-1, 1e-2, 1e-3)
ABS_THRESHOLDS = (1e-2, 1e-3, 1e-4)   # on the loss itself: the theorems' loss ≤ ε² (icl.analyse.fits.eps_of)
UNIF_THRESHOLDS = (5e-1,)  # on the loss over uniform attention's, what every L's labels scale with (ldl.faster_with_L)
MEMORISES = 0.05       # test loss up by this share from its lowest while the train loss fell by as much
ESCAPE = 0.5           # t_escape: the query's error below this share of predicting 0's
ESCAPE_WINDOW = 0.01   # ... averaged over a trailing window of this share of the epochs (at least 1)
NOISE_TARGET = 0.05    # a crossing is read on the loss averaged until its noise is this much (log units) ...
MAX_WINDOW = 0.1       # ... over at most this share of the epochs


LLC_STATUS = {0: "ok", 1: "diverged", 2: "not stationary", 3: "negative: not at a local minimum",
              4: "the run diverged in training"}   # icl.train.llc's chain check


def denoise_windows(loss: np.ndarray) -> np.ndarray:
    """Per run, the epochs (odd, at least 1) whose log-loss a crossing is averaged over: the fewest
    that bring the trace's epoch-to-epoch noise (noise_level of its log) down to NOISE_TARGET, at
    most MAX_WINDOW of the epochs. A trace without noise (full-batch GD on fixed prompts) gets 1."""
    logs = np.log(np.clip(np.nan_to_num(np.asarray(loss, float), nan=np.inf), 1e-300, np.inf))
    cap = max(1, int(MAX_WINDOW * loss.shape[1]) // 2 * 2 + 1)
    out = []
    for z in logs:
        z = z[np.isfinite(z)]
        w = math.ceil((noise_level(z) / NOISE_TARGET) ** 2) if len(z) else 1
        out.append(min(cap, w // 2 * 2 + 1))
    return np.array(out, int)


def denoised(loss: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """Each run's trace (R, E) as a centred moving geometric mean over its window (denoise_windows),
    shrinking at the ends to the epochs there are; an epoch whose loss is not finite (a run that
    diverged) stays as it is and is left out of its neighbours' means. Read raw, a noisy trace's
    first epoch below a level is the deepest dip of its noise, not the loss reaching it: with fresh
    prompts (200 a step in ldl_polynomial: ±20 % from step to step) softmax_q's runs first fell
    below half of uniform attention's loss at epochs 5-24 by such dips, and averaged over 19 epochs
    never did. Centred, the window reads an abrupt drop up to half a window early."""
    x = np.asarray(loss, float)
    out = x.copy()
    E = x.shape[1]
    i = np.arange(E)
    for r, w in enumerate(windows):
        if w > 1:
            with np.errstate(divide="ignore", invalid="ignore"):
                z = np.log(np.clip(x[r], 1e-300, None))
            fin = np.isfinite(z)
            sums = np.concatenate([[0.0], np.cumsum(np.where(fin, z, 0.0))])
            counts = np.concatenate([[0], np.cumsum(fin)])
            lo, hi = np.maximum(i - w // 2, 0), np.minimum(i + w // 2 + 1, E)
            n = counts[hi] - counts[lo]
            with np.errstate(divide="ignore", invalid="ignore"):
                out[r] = np.where(fin & (n > 0), np.exp((sums[hi] - sums[lo]) / np.maximum(n, 1)), x[r])
    return out


def _tname(prefix: str, x: float) -> str:
    return f"{prefix}_{x:.0e}".replace("e-0", "e-")


def crossing_time(ratio: np.ndarray, epochs: np.ndarray, x: float) -> pd.array:
    """t_x: when train_loss / loss0 (or the loss itself) first falls to x, per run, interpolated
    in log-loss between the two logged epochs around the crossing (null if never). The first
    logged epoch at or below x would quantise times to the logging grid: on a 4-epoch grid a
    run crossing at epoch 1.3 reads 4, and slopes over L come out of the grid, not the run."""
    r = np.nan_to_num(np.asarray(ratio, float), nan=np.inf)
    hit = r <= x
    i = hit.argmax(1)
    rows = np.arange(len(r))
    prev = np.maximum(i - 1, 0)
    a, b = r[rows, prev], r[rows, i]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where((i > 0) & (a > x) & (b > 0) & np.isfinite(a),
                        (np.log(a) - np.log(x)) / (np.log(a) - np.log(np.maximum(b, 1e-300))), 1.0)
    t = epochs[prev] + np.clip(frac, 0.0, 1.0) * (epochs[i] - epochs[prev])
    return pd.array(np.where(hit.any(1), t, np.nan), dtype="Float64")


def logit_dynamics(q: np.ndarray) -> dict:
    """Per run, from its feature logits q (R, E, K, K) at every epoch (q[r, e, i, j] = v_jᵀ Q v_i,
    i the query's feature): `qoff_rate`, the median over off-diagonal logits of −Δq_(i,j)/Δq_(i,i)
    over training (where the own logit rose); `qoff_fell`, the share of off-diagonal logits that
    fell; `qoff_oscillates`, the share whose increments change sign at least once (steps below
    1e-6 of the largest left out); `qoff_path_excess`, the median over them of their path over
    their net change minus 1 (0 for a monotone change, however noisy the grid); `qown_drop`, the
    largest single-epoch fall of an own logit as a share of its rise (Lemma 2: 0)."""
    R, E, K, _ = q.shape
    off, eye = ~np.eye(K, dtype=bool), np.eye(K, dtype=bool)
    total = q[:, -1] - q[:, 0]
    own_rise = np.diagonal(total, axis1=1, axis2=2)                # (R, K)
    rise = np.broadcast_to(own_rise[:, :, None], (R, K, K))[:, off]
    change = total[:, off]                                         # (R, K(K-1))
    ratio = np.where(rise > 0, -change / np.where(rise > 0, rise, 1.0), np.nan)
    some = (rise > 0).any(1)                                       # runs whose own logits rose at all
    rate = np.full(R, np.nan)
    rate[some] = np.nanmedian(ratio[some], axis=1)
    inc = np.diff(q, axis=1)[:, :, off]                            # (R, E-1, K(K-1))
    tol = 1e-6 * (np.abs(inc).max(axis=1, keepdims=True) + 1e-30)
    sgn = np.where(np.abs(inc) > tol, np.sign(inc), 0.0)
    last = np.zeros_like(sgn[:, 0])                                # the last nonzero sign so far
    flips = np.zeros(last.shape, dtype=bool)
    for e in range(sgn.shape[1]):
        s = sgn[:, e]
        flips |= (s != 0) & (last != 0) & (s != last)
        last = np.where(s != 0, s, last)
    path = np.abs(inc).sum(1)
    net = np.abs(change)
    excess = np.where(net > 1e-12 * (path + 1e-30), path / np.where(net > 0, net, 1.0) - 1.0, np.nan)
    own_inc = np.diff(q, axis=1)[:, :, eye]                        # (R, E-1, K)
    drop = np.where(own_rise > 0, np.clip(-own_inc, 0, None).max(1) / np.where(own_rise > 0, own_rise, 1.0), np.nan)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)      # runs whose logits never moved: NaN, said so
        return {"qoff_rate": rate, "qoff_fell": (change < 0).mean(1), "qoff_oscillates": flips.mean(1),
                "qoff_path_excess": np.nanmedian(np.where(np.isfinite(excess), excess, np.nan), axis=1)
                if excess.size else np.full(R, np.nan),
                "qown_drop": np.nanmax(np.where(np.isfinite(drop), drop, -np.inf), axis=1).clip(0)
                if drop.size else np.full(R, np.nan)}


def level_time(values: np.ndarray, epochs: np.ndarray, level: np.ndarray) -> np.ndarray:
    """When each run's `values` (R, E) first rise to its `level`, interpolated linearly between
    the epochs around the crossing (NaN if never)."""
    v = np.nan_to_num(values, nan=-np.inf)
    hit = v >= level[:, None]
    i = hit.argmax(1)
    rows = np.arange(len(v))
    prev = np.maximum(i - 1, 0)
    a, b = v[rows, prev], v[rows, i]
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where((i > 0) & (a < level) & np.isfinite(a), (level - a) / (b - a), 1.0)
    t = epochs[prev] + np.clip(frac, 0.0, 1.0) * (epochs[i] - epochs[prev])
    return np.where(hit.any(1), t, np.nan)


def at_times(values: np.ndarray, epochs: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Each run's values (R, E) at its own time t (R,), interpolated (NaN where t is)."""
    return np.array([np.interp(ti, epochs, v) if np.isfinite(ti) else np.nan for v, ti in zip(values, t)])


def escape_time(query: np.ndarray, zero: np.ndarray, window: int) -> pd.array:
    """t_escape per run: the first epoch at which the query's error, summed over the `window`
    epochs ending there, falls below ESCAPE times predicting 0's on the same prompts (the end
    of a plateau at ŷ ≈ 0); <NA> if never. The window tames one batch's noise (fresh prompts:
    64 of them make a ratio that jumps by ±20 % from step to step)."""
    def trailing(a):
        c = np.cumsum(np.nan_to_num(a), axis=1)
        return c - np.pad(c, ((0, 0), (window, 0)))[:, :-window]
    below = (trailing(query) < ESCAPE * trailing(zero)) & np.isfinite(query)
    below[:, :window - 1] = False          # a full window first
    t = below.argmax(1)
    return pd.array(np.where(below.any(1), t, None), dtype="Int64")


def late_exponent(loss: np.ndarray, epochs: np.ndarray) -> np.ndarray:
    """a of loss ∝ t^−a over the later half (in log t) of each run's training."""
    t = epochs.astype(float)
    keep = (t > 0) & (np.log(np.maximum(t, 1)) >= 0.5 * np.log(max(t[-1], 1.0)))
    out = np.full(len(loss), np.nan)
    if keep.sum() < 3:
        return out
    x = np.log(t[keep])
    for r, y in enumerate(loss[:, keep]):
        ok = np.isfinite(y) & (y > 0)
        if ok.sum() >= 3:
            xm = x[ok] - x[ok].mean()
            out[r] = -float((xm * (np.log(y[ok]) - np.log(y[ok]).mean())).sum() / (xm * xm).sum())
    return out


def memorises(train: np.ndarray, test: np.ndarray) -> np.ndarray:
    """Runs whose test loss on new functions rose by MEMORISES from its lowest logged value while
    their train loss fell by as much over the same stretch: they learn their prompts, not to
    learn in context."""
    with np.errstate(invalid="ignore"):
        best = np.nanargmin(np.where(np.isfinite(test), test, np.inf), axis=1)
    rows = np.arange(len(test))
    rose = test[:, -1] > (1 + MEMORISES) * test[rows, best]
    fell = train[:, -1] < (1 - MEMORISES) * train[rows, best]
    return rose & fell & np.isfinite(test[:, -1])


def phase_fits(loss: np.ndarray, attn: np.ndarray, epochs: np.ndarray, ref: np.ndarray) -> list:
    """Per run, (icl.tables.phases.fit of its own logit from epoch 0 to its phase_window, that logit):
    the seeds' spread the count is chosen by is measured on the logits (phases_over_seeds); runs
    with the same curves are fitted once. (None, None) for a run with no own attention."""
    out, seen = [], {}
    for l, a, r in zip(loss, attn, ref):
        if not np.isfinite(a).any():
            out.append((None, None))
            continue
        key = (l.tobytes(), a.tobytes(), float(r))
        if key not in seen:
            z = logit(a[:phase_window(l, r) + 1])
            seen[key] = (fit(epochs[:len(z)], z), z)
        out.append(seen[key])
    return out


# what a run's replicate differs in: its seed and what the seed draws (prompts, the shard it fell in)
DRAW_COLUMNS = ("run_id", "seed", "shard", "data_id", "experiment", "config_hash", "code_version")


def setting_keys(runs: pd.DataFrame) -> pd.Series:
    """One key per run naming its setting: every column of runs.parquet but DRAW_COLUMNS."""
    cols = [c for c in runs.columns if c not in DRAW_COLUMNS]
    return runs[cols].apply(lambda col: col.map(str)).agg("|".join, axis=1) if cols else pd.Series("", index=runs.index)


def phases_over_seeds(summary: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The phase count of every run, chosen against its replicates (icl.tables.phases.choose): per
    setting (setting_keys), the seeds' spread of their own logits (`phase_spread`), and per run the
    fewest pieces that fit it within that spread (`n_phases`, with its `phase_ends` and the
    off-diagonal logits' rate in each of them, `qoff_phase_rates`). A setting with one seed has no
    spread: its runs have no count."""
    out = summary.copy()
    key = setting_keys(runs.set_index("run_id").reindex(out["run_id"]).reset_index())
    traces = out.pop("phase_logit")
    by_count = out.pop("qoff_rates_by_count")
    spreads = pd.Series(np.nan, index=out.index)
    for _, idx in key.groupby(key.to_numpy()).groups.items():
        got = [traces[i] for i in idx if traces[i] is not None]
        spreads[idx] = spread(got) if len(got) == len(idx) else np.nan
    n = [choose(r, w) if r is not None else None for r, w in zip(out["phase_rms"], spreads)]
    out["phase_spread"] = spreads.to_numpy(float)
    out["n_phases"] = pd.array(n, dtype="Int64")
    out["phase_ends"] = pd.Series([list(e[k - 1]) if k else [] for e, k in zip(out["phase_fit_ends"], n)],
                                  index=out.index, dtype="object")
    out["qoff_phase_rates"] = pd.Series([list(q[k - 1]) if k and q else [] for q, k in zip(by_count, n)],
                                        index=out.index, dtype="object")
    return out


def phase_rates(q: np.ndarray, epochs: np.ndarray, bounds: list) -> list:
    """Per run, the off-diagonal logits' mean rate against the own logit's in each phase (what
    LDL's Props. 2-4 bound: |g_(k,k')| = O(·/K²) against g_k = Θ(·/K), so the ratio is O(1/K)):
    over the epochs [b_j, b_(j+1)] of phase j (`bounds[r]`: the run's phase boundaries in epochs,
    its start, icl.tables.phases' ends and the end of its window), the mean over off-diagonal logits
    q_(i,j) of their path Σ|Δq| (every epoch's change counted, so an oscillation counts in full)
    over the mean over own logits of their rise; NaN where the own logits did not rise. q (R, E,
    K, K) on `epochs`."""
    R, E, K, _ = q.shape
    off, eye = ~np.eye(K, dtype=bool), np.eye(K, dtype=bool)
    out = []
    for r in range(R):
        b = np.clip(np.searchsorted(epochs, np.asarray(bounds[r], float)), 0, E - 1)
        rates = []
        for i, j in zip(b[:-1], b[1:]):
            seg = q[r, i:j + 1]
            rise = float((seg[-1] - seg[0])[eye].mean()) if j > i else 0.0
            path = float(np.abs(np.diff(seg, axis=0))[:, off].sum(0).mean()) if j > i else 0.0
            rates.append(path / rise if rise > 0 and np.isfinite(path) else np.nan)
        out.append(rates)
    return out


def last_layer_map(attn: np.ndarray) -> np.ndarray:
    """attn (R, E, K, K), or (R, E, layers, heads, K, K): the map attn_own reads, the last layer's
    averaged over its heads."""
    return attn[:, :, -1].mean(2) if attn.ndim == 6 else attn


def summary_table(sh: dict) -> pd.DataFrame:
    """One summary row per run of a shard: losses, what needs no training, crossing times and the
    own attention there, phases, the end of Phase I, attention, memorisation and logit dynamics."""
    rid, ep = sh["run_id"].astype(str), sh["epoch"]
    R, K = len(rid), sh["attn"].shape[-1]
    traced = "trace_train_loss" in sh
    tl = sh["trace_train_loss"] if traced else sh["train_loss"]
    t_ep = np.arange(tl.shape[1]) if traced else ep
    own = sh["trace_attn_own"] if traced and "trace_attn_own" in sh else \
        (sh["attn_own"] if K else np.full(tl.shape, np.nan))
    loss0 = sh["train_loss"][:, 0]           # the logged loss: on the same prompts as final_train_loss
    wider = "test_query_loss" in sh and "trace_query_loss" in sh     # the objective reads more than the query
    # what crossings are read on: the trace with its noise averaged out, over the noisier trace's window
    windows = np.maximum(denoise_windows(tl), denoise_windows(sh["trace_query_loss"]) if wider else 1) \
        if traced else np.ones(R, int)
    smooth = denoised(tl, windows)
    ratio = smooth / tl[:, :1]               # the trace against its own start (fresh prompts: each epoch's own)
    summ = pd.DataFrame({
        "run_id": rid, "loss0": loss0, "final_train_loss": sh["train_loss"][:, -1],
        "final_test_loss": sh["test_loss"][:, -1],
        "attn_own_final": sh["attn_own"][:, -1] if K else np.full(R, np.nan),
        "diverged": sh["diverged_at"] >= 0,
        "diverged_epoch": pd.array(np.where(sh["diverged_at"] >= 0, sh["diverged_at"], None), dtype="Int64"),
    })
    # the query's own error where the objective reads more positions (a GPT's `loss: all`, whose logs
    # hold test_query_loss): the references below are at the query. The train side is the state
    # training ended in, the trace's last epoch; elsewhere the objective is the query's error.
    summ["final_query_train_loss"] = sh["trace_query_loss"][:, -1] if wider else summ["final_train_loss"]
    summ["final_query_test_loss"] = sh["test_query_loss"][:, -1] if wider else summ["final_test_loss"]
    for key in ("uniform_train_loss", "uniform_test_loss", "oracle_test_loss"):
        summ[key] = sh[key] if key in sh else np.nan
    summ["crossing_window"] = windows
    for prefix, xs, series in (("t_rel", REL_THRESHOLDS, ratio), ("t_abs", ABS_THRESHOLDS, smooth)):
        for x in xs:
            col = _tname(prefix, x)
            summ[col] = crossing_time(series, t_ep, x)
            summ[f"attn_at_{col}"] = at_times(own, t_ep, summ[col].to_numpy(float, na_value=np.nan))
    ref = summ["uniform_train_loss"].to_numpy(float)
    ref = np.where(np.isfinite(ref), ref, loss0)        # uniform attention's loss, loss₀ where it was not measured
    at_query = denoised(sh["trace_query_loss"], windows) if wider else smooth   # where uniform attention's loss is
    for x in UNIF_THRESHOLDS:
        summ[_tname("t_unif", x)] = crossing_time(at_query / ref[:, None], t_ep, x)
    if K and "tokens_K" in sh:
        level = np.full(R, 1.0 / (1.0 + delta_conc(int(sh["tokens_K"]), int(sh["prompts_N"]))))
        summ["t_phase_one"] = level_time(own, t_ep, level)
        # Theorem 1 at ε = 1/K: its loss ≤ ε² read against the start, every epoch (icl.analyse.claims.ldl.bound)
        summ["t_one_over_K"] = crossing_time(ratio, t_ep, 1.0 / int(sh["tokens_K"]) ** 2)
        summ["t_two_over_K"] = crossing_time(ratio, t_ep, min(1.0, 2.0 / int(sh["tokens_K"])) ** 2)   # K ≥ 1/ε at ×2
    else:
        summ["t_phase_one"] = np.nan
        summ["t_one_over_K"] = summ["t_two_over_K"] = np.nan
    found = phase_fits(tl, own, t_ep, ref)      # counted against the seeds' spread by phases_over_seeds
    summ["phase_rms"] = pd.Series([list(f.rms) if f else None for f, _ in found], dtype="object")
    summ["phase_fit_ends"] = pd.Series([list(f.ends) if f else [] for f, _ in found], dtype="object")
    summ["phase_logit"] = pd.Series([z for _, z in found], dtype="object")
    summ["late_exponent"] = late_exponent(tl, t_ep)
    if "trace_query_loss" in sh:
        summ["t_escape"] = escape_time(sh["trace_query_loss"], sh["trace_zero_loss"],
                                       max(1, round(ESCAPE_WINDOW * (tl.shape[1] - 1))))
    else:
        summ["t_escape"] = pd.array([None] * R, dtype="Int64")
    # fresh prompts every epoch cannot be memorised: what looks like it there is the batches' noise
    summ["memorises"] = False if bool(sh.get("train_fresh", False)) else memorises(sh["train_loss"], sh["test_loss"])
    summ["test_loss0"] = sh["test_loss"][:, 0]
    summ["attn_knn_final"] = sh["attn_knn"][:, -1] if "attn_knn" in sh else np.nan
    summ["dist_target_final"] = sh["dist_target"][:, -1] if "dist_target" in sh else np.nan
    summ["attn_off_final"] = np.nan
    summ["attn_off_oscillates"] = pd.array([None] * R, dtype="boolean")
    if K:
        amap = last_layer_map(sh["attn"])
        off = (amap.sum(axis=(2, 3)) - np.trace(amap, axis1=2, axis2=3)) / (K * (K - 1))
        summ["attn_off_final"] = off[:, -1]
        # oscillation: the mean off-diagonal attention turns from falling to rising at least once
        d = np.diff(off, axis=1)
        summ["attn_off_oscillates"] = pd.array(((d[:, :-1] < -1e-4) & (d[:, 1:] > 1e-4)).any(1), dtype="boolean")
    q = sh.get("trace_q_features", sh.get("q_features"))
    dyn = logit_dynamics(q) if q is not None and q.size and q.shape[1] > 1 else {}
    for col in ("qoff_rate", "qoff_fell", "qoff_oscillates", "qoff_path_excess", "qown_drop"):
        summ[col] = dyn.get(col, np.full(R, np.nan))
    # each phase's rate, for every count the seeds may choose: q on the epochs it was kept on (the
    # trace's every epoch, or the logged ones)
    by_count = [[] for _ in range(R)]
    if dyn:
        q_ep = t_ep if "trace_q_features" in sh else ep
        for k in range(MAX_PHASES):
            ends = [[0.0, *(f.ends[k] if f else []), float(t_ep[phase_window(l, r)])]
                    for (f, _), l, r in zip(found, tl, ref)]
            for r, rates in enumerate(phase_rates(q, q_ep, ends)):
                by_count[r].append(rates)
    summ["qoff_rates_by_count"] = pd.Series(by_count, dtype="object")
    for col, values in llc_summary(sh).items():
        summ[col] = values
    summ["train_seconds"] = float(sh["seconds"]) / R
    summ["device"] = str(sh["device"])
    summ["precision"] = str(sh.get("precision", "float32"))      # what its matmuls ran in (train.precision)
    summ["code_version"] = str(sh["code_version"]) if "code_version" in sh else "unknown"
    summ["code_hash"] = str(sh["code_hash"]) if "code_hash" in sh else "unknown"
    return summ


def llc_summary(sh: dict) -> dict:
    """Per-run columns of the LLC (train.llc) for summary.parquet: the last usable estimate and its
    standard error, how many checkpoints were usable, and the stages (icl.tables.stages: turns of λ̂
    past the swing the run's own null allows, `llc_swing`, with that null's false-boundary rate)."""
    R = len(sh["run_id"])
    if "llc_llc" not in sh:
        return {"llc_final": np.full(R, np.nan), "llc_final_se": np.full(R, np.nan),
                "llc_usable": pd.array([None] * R, dtype="Int64"), "llc_stages": pd.array([None] * R, dtype="Int64"),
                "llc_boundaries": pd.Series([[] for _ in range(R)], dtype="object"),
                "llc_swing": np.full(R, np.nan), "llc_null_rate": np.full(R, np.nan),
                "llc_plateau_ratio": np.full(R, np.nan), "llc_on_plateau": pd.array([None] * R, dtype="boolean")}
    ok = sh["llc_status"] == 0
    est = np.where(ok, sh["llc_llc"], np.nan)
    se = np.where(ok, sh["llc_se"], np.nan)
    last = np.array([np.flatnonzero(np.isfinite(r))[-1] if np.isfinite(r).any() else -1 for r in est])
    rows = np.arange(R)
    chains = int(sh["llc_per_chain"].shape[-1]) if "llc_per_chain" in sh else 1
    found = [stages(est[r], se[r], sh["llc_epoch"], chains, sh["run_id"][r]) for r in range(R)]
    return {"llc_final": np.where(last >= 0, est[rows, last], np.nan),
            "llc_final_se": np.where(last >= 0, se[rows, last], np.nan),
            "llc_usable": pd.array(ok.sum(1), dtype="Int64"),
            "llc_stages": pd.array([None if b is None else len(b) + 1 for b, _, _ in found], dtype="Int64"),
            "llc_boundaries": pd.Series([b or [] for b, _, _ in found], dtype="object"),
            "llc_swing": np.array([w for _, w, _ in found], float),
            "llc_null_rate": np.array([q for _, _, q in found], float), **plateau(sh)}


PLATEAU_Z, PLATEAU_SHARE = 2.0, 0.1   # λ̂ moved off its plateau: by more than 2 errors and a tenth of itself


def plateau(sh: dict) -> dict:
    """Whether the last checkpoint's λ̂ sits on its plateau in the localisation γ (icl.train.llc.
    measure_plateau: the same estimate at a weaker γ): `llc_plateau_ratio`, λ̂ there over λ̂ at γ, and
    `llc_on_plateau`: True where the change's interval (± PLATEAU_Z errors) lies within PLATEAU_SHARE
    of λ̂, False where it moved by more than PLATEAU_Z errors and PLATEAU_SHARE of itself (the
    localisation, not λ, set it: λ̂ ≈ nβ·tr(H)/2γ, a curvature trace), NA where the chains cannot
    tell, where either estimate failed its chain check or none was made."""
    R = len(sh["run_id"])
    if "llc_plateau_status" not in sh:
        return {"llc_plateau_ratio": np.full(R, np.nan), "llc_on_plateau": pd.array([None] * R, dtype="boolean")}
    both = (sh["llc_plateau_status"][:, -1] == 0) & (sh["llc_status"][:, -1] == 0)
    base, p = sh["llc_llc"][:, -1], sh["llc_plateau_llc"][:, -1]
    err = np.hypot(sh["llc_se"][:, -1], sh["llc_plateau_se"][:, -1])
    with np.errstate(divide="ignore", invalid="ignore"):
        moved = (np.abs(p - base) > PLATEAU_Z * err) & (np.abs(p - base) > PLATEAU_SHARE * np.abs(base))
        flat = np.abs(p - base) + PLATEAU_Z * err <= PLATEAU_SHARE * np.abs(base)
        ratio = np.where(both, p / base, np.nan)
    on = np.where(both & moved, False, np.where(both & flat, True, None))
    return {"llc_plateau_ratio": ratio, "llc_on_plateau": pd.array(on, dtype="boolean")}