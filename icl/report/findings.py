"""What an experiment found, in whole sentences (issue 62): per claim what holds and what does not,
for which model, in how many of its testable settings, with the first decided row's measurement and
whom a failure is against; why the not-testable rows are not testable, every one of them counted in
exactly one group; the index's line from the same sentences. Claims are named by their words
(icl.analyse.claims.CLAIMS), never by their ids: the ids stay in the grid and the tables."""
from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd

from icl.analyse import claims
from icl.analyse.claims.ldl.identities import regime_of

# a group's leading "key=value, key=value" is its setting; what follows a ";" is the claim's aspect
SETTING = re.compile(r"^\s*[A-Za-z_][\w.]*=[^;]*")

# Why a row is not testable, grouped (the first whose test matches a reason wins); a reason that no
# group names is grouped with the reasons that share its first clause, in its own words.
UNTESTABLE = (
    ("the one collapse clock fixes what they measure (LDL's model has one curve in rescaled time at every L, Δ and N)",
     lambda r: r.startswith("one collapse clock")),
    ("an identity of the model fixes them (the scale identity in ηL², softmax's shift invariance, Lemma 2's sign)",
     lambda r: "scales them by L" in r or "GD at (η, L) is GD at (ηL², 1)" in r or r.startswith("softmax's shift")
     or "by algebra" in r),
    ("their runs lie outside the theorem's hypotheses", lambda r: r.startswith("outside ")),
    ("a bound is judged as a bound, and no rate at one size can contradict it",
     lambda r: r.startswith(("a bound is judged", "no accuracy inside")) or re.match(r"^Proposition \d bounds", r)),
    ("another row reports the same runs or dynamics", lambda r: r.startswith("the same ")),
    ("every run of the setting was left out (diverged, memorised its prompts, or crossed within a few steps)",
     lambda r: r.startswith("every ") and "left out" in r.split(";")[0]),
    ("the claim is about full-batch GD and these runs used Adam", lambda r: r.startswith("the theorem is about full-batch GD")),
    ("one step overshoots the loss's curvature scale, where Lemma 2's flow does not apply", lambda r: "overshoots" in r),
    ("the learning coefficient reads its localisation, not λ (it moved when γ was cut tenfold)",
     lambda r: r.startswith("λ̂ reads the localisation")),
    ("the model or the data lack what the claim reads",
     lambda r: any(k in r.split(";")[0] for k in (
         "only softmax_q", "is derived for", "continuous tokens", "discrete features", "convex combination",
         "no trained", "no GPT", "trained on a fixed covariance", "no shift", "positional", "no 'random_covariance",
         "learned-positions effect", "the runs have no L*"))),
    ("the sweep has too few values, runs or dynamics for the statistic",
     lambda r: any(k in r.split(";")[0] for k in (
         "no seed has two values", "one value of L", "fewer than two", "does not cross L*", "no value of L",
         "nothing to follow", "no run's logits", "no run reached", "counted as the runs are", "has not learned",
         "no flat run", "no sharp run", "this setting does not sweep"))),
)


def setting_of(group: str) -> tuple[str, str]:
    """(setting, aspect) of a verdict row's group: "delta=3, N=50; rate" -> ("delta=3, N=50", "rate")."""
    group = "" if group is None or (isinstance(group, float) and np.isnan(group)) else str(group)
    m = SETTING.match(group)
    if not m:
        return "", group.strip()
    return m.group(0).strip(), group[m.end():].lstrip(";").strip()



def _rows(verdicts: pd.DataFrame) -> pd.DataFrame:
    return verdicts[verdicts["scope"] != "run"] if "scope" in verdicts else verdicts


def _pattern(reason: str) -> str:
    return re.sub(r"[-+]?\d[\d.,eE+\-×⁻⁰¹²³⁴⁵⁶⁷⁸⁹]*", "#", reason or "").strip()


def clauses(text: str) -> list[str]:
    """A text's '; '-separated clauses, never split inside brackets or quotes."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{“":
            depth += 1
        elif ch in ")]}”":
            depth = max(depth - 1, 0)
        elif ch == ";" and depth == 0 and text[i + 1:i + 2] == " ":
            out.append(text[start:i])
            start = i + 2
    return out + [text[start:]]


def _first_sentence(text: str, limit: int = 260) -> str:
    """The first sentence of a reason, in whole clauses ('; '-separated, outside brackets) up to
    `limit` characters: never cut mid-phrase nor inside a bracket (a first clause longer than that
    is kept whole; the rest of the reason is in the verdict table)."""
    text = (text or "").strip()
    cut = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text, maxsplit=1)[0]
    if len(cut) <= limit:
        return cut
    parts = clauses(cut)
    out = parts[0]
    for c in parts[1:]:
        if len(out) + 2 + len(c) > limit:
            break
        out += "; " + c
    return out


def _where(bad: pd.DataFrame, every: list[str]) -> str:
    """The settings of failing rows, by aspect: "oscillation: every delta × N (9)" where an aspect
    fails in each of the claim's settings (`every`), else the settings named in their natural order
    ("delta=1.5, N=50; delta=3, N=50"), at most `most` of them."""
    parts = bad["group"].map(setting_of)
    out = []
    for aspect in dict.fromkeys(a for _, a in parts):
        settings = sorted({s for s, a in parts if a == aspect}, key=setting_key)
        if len(settings) > 2 and set(settings) == set(every):
            keys = " × ".join(dict.fromkeys(_words(k.split("=")[0].strip()) for k in settings[0].split(",")))
            named = f"every {keys} ({len(settings)})"
        else:
            most = 8
            named = "; ".join(_words(s) or "all runs" for s in settings[:most]) + \
                (f"; and {len(settings) - most} more" if len(settings) > most else "")
        out.append(f"{aspect}: {named}" if aspect else named)
    return " | ".join(out)


def _commonest(reasons: pd.Series) -> tuple[str, int]:
    """The commonest reason (compared with their numbers masked) in its first row's own words, and
    how many rows give it."""
    reasons = reasons.fillna("").astype(str)
    reasons = reasons[reasons.str.strip() != ""]
    if not len(reasons):
        return "", 0
    common, n = Counter(reasons.map(_pattern)).most_common(1)[0]
    return _first_sentence(reasons[reasons.map(_pattern) == common].iloc[0]), n


def _why_by_regime(fails: pd.DataFrame) -> str:
    """The commonest reason of the failing rows; where they cover several regimes (their groups
    name flat and sharp), each regime's own, so that the sentence quotes the band of every regime
    it covers (issue 50: a sentence over both regimes quoted the flat band only)."""
    regime = fails["group"].fillna("").astype(str).map(regime_of)
    regs = [r for r in ("flat", "sharp") if (regime == r).any()]
    if len(regs) < 2:
        return _commonest(fails["reason"])[0]
    parts = [(r, _commonest(fails.loc[regime == r, "reason"])[0]) for r in regs]
    if len({w for _, w in parts}) == 1:
        return parts[0][1]
    return "; ".join(f"{r}: {w}" for r, w in parts if w)


KEY_WORDS = {"delta": "Δ", "token_kind": "tokens", "lr": "η", "positional": "positions", "task_kind": "task",
             "model_kind": "model"}


def _words(s: str) -> str:
    """Setting keys as prose: "delta=3, N=1600" -> "Δ = 3, N = 1600", "token_kind=gaussian" -> "tokens = gaussian"."""
    return re.sub(r"\b(" + "|".join(KEY_WORDS) + r")\b", lambda m: KEY_WORDS[m.group(1)], s).replace("=", " = ")


def setting_key(s: str):
    """Settings in a natural order: "" first, then by their values read as numbers where they are."""
    if not s:
        return (0, ())
    vals = []
    for part in s.split(","):
        k, _, v = part.partition("=")
        try:
            vals.append((k.strip(), 0, float(v), ""))
        except ValueError:
            vals.append((k.strip(), 1, 0.0, v.strip()))
    return (1, tuple(vals))


def claim_words(cid: str) -> str:
    """A claim as a sentence names it: its words in quotes, marked 'beyond LDL's model' for an
    extension (`.ext`: judged on a model the theorem is not about)."""
    text = claims.CLAIMS.get(claims.base_id(cid), cid)
    return f"“{text[0].upper()}{text[1:]}”" + (" (beyond LDL's model)" if cid.endswith(claims.EXT) else "")


def setting_words(group: str) -> str:
    """A row's group as prose: "delta=3, N=1600; sharp" -> "Δ = 3, N = 1600, sharp"."""
    s, aspect = setting_of(group)
    return ", ".join(p for p in (_words(s), aspect) if p) or "all runs"


def _settings(n: int) -> str:
    return claims.count(n, "setting")


def _measured(r: pd.Series) -> str:
    """A decided row's number, '0.649 [0.284, 1.01]', or ''."""
    if pd.isna(r.get("value")):
        return ""
    v = claims.fmt(float(r["value"]))
    if pd.notna(r.get("ci_lo")) and pd.notna(r.get("ci_hi")):
        v += f" [{claims.fmt(float(r['ci_lo']))}, {claims.fmt(float(r['ci_hi']))}]"
    return v


def against_words(fails: pd.DataFrame) -> str:
    """Whom failing rows are against, in words: 'against the theorem in 2 and against its own
    dynamics in 1', or '' where no row says (icl.analyse.claims.ldl.flow)."""
    if "against" not in fails:
        return ""
    n = fails["against"].dropna().astype(str).value_counts()
    words = {"theorem": "the theorem", "dynamics": "the theory's own dynamics"}
    return " and ".join(f"against {words[a]} in {int(n[a])}" for a in claims.AGAINST if n.get(a, 0))


def claim_sentences(verdicts: pd.DataFrame) -> list[str]:
    """One sentence per claim and model with a decided row: what does not hold first (the settings
    named, the first failing row's measurement against its prediction, whom it is against), then what
    holds (in how many testable settings, and how many more read inconclusive)."""
    rows = _rows(verdicts)
    fails, holds = [], []
    for (cid, model), g in rows.groupby(["claim_id", rows["model"].astype(str)], sort=False):
        testable = g[g["verdict"] != claims.NOT_TESTABLE]
        bad, good = g[g["verdict"] == claims.FAILS], g[g["verdict"] == claims.HOLDS]
        unsure = int((g["verdict"] == claims.UNSURE).sum())
        who = "" if model == "all" else f" for {model}"
        if len(bad):
            share = claims.every(len(bad), "testable setting") if len(bad) == len(testable) else \
                claims.of(len(bad), len(testable), "testable setting")
            every = [setting_of(x)[0] for x in g["group"]]
            why = _why_by_regime(bad)
            ag = against_words(bad)
            fails.append(f"{claim_words(cid)} does not hold{who} in {share} ({_where(bad, every)})"
                         + (f", {ag}" if ag else "") + (f": {why}" if why else "")
                         + (f"; it holds in {claims.count(len(good), 'other setting')}" if len(good) else "") + ".")
        elif len(good):
            share = claims.every(len(good), "testable setting") if len(good) == len(testable) else \
                claims.of(len(good), len(testable), "testable setting")
            where = f" ({'; '.join(setting_words(x) for x in good['group'])})" if len(good) <= 2 else ""
            holds.append(f"{claim_words(cid)} holds{who} in {share}{where}" + (f" ({unsure} inconclusive)" if unsure else "")
                         + (f": measured {_measured(good.iloc[0])}" if len(good) == 1 and _measured(good.iloc[0]) else "")
                         + ".")
    return fails + holds


def untestable_groups(verdicts: pd.DataFrame) -> list[tuple[str, int]]:
    """The not-testable per-setting rows by why (UNTESTABLE; the rest by their first clause), each
    row in exactly one group, the largest first."""
    nt = _rows(verdicts)
    reasons = nt.loc[nt["verdict"] == claims.NOT_TESTABLE, "reason"].fillna("").astype(str)
    counts: dict[str, int] = {}
    for r in reasons:
        label = next((lab for lab, test in UNTESTABLE if test(r)), None)
        if label is None:
            first = re.split(r"[;:]", r, maxsplit=1)[0].strip() or "no reason given"
            label = re.sub(r"[-+]?\d[\d.,]*", "#", first) if len(first) > 90 else first
        counts[label] = counts.get(label, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])


def untestable_sentence(verdicts: pd.DataFrame) -> str:
    """Why the not-testable rows are: '106 of 232 rows are not testable: 60 because …, 34 because …'."""
    rows = _rows(verdicts)
    groups = untestable_groups(verdicts)
    n = sum(k for _, k in groups)
    if not n:
        return ""
    parts = [f"{k} because {lab}" for lab, k in groups]
    return (f"{claims.of(n, len(rows), 'row')} {'is' if n == 1 else 'are'} not testable: " + "; ".join(parts) + ".")


def inconclusive_sentence(verdicts: pd.DataFrame) -> str:
    """The claims decided nowhere but read inconclusive somewhere, in one sentence, or ''."""
    rows = _rows(verdicts)
    out = []
    for cid, g in rows.groupby("claim_id", sort=False):
        if g["verdict"].isin([claims.HOLDS, claims.FAILS]).any():
            continue
        k = int((g["verdict"] == claims.UNSURE).sum())
        if k:
            out.append(f"{claim_words(cid)} ({_settings(k)})")
    if not out:
        return ""
    return "Inconclusive wherever testable (the interval straddles its band): " + "; ".join(out) + "."


def fragile_sentence(verdicts: pd.DataFrame) -> str:
    """How many decided rows another reasonable analysis choice reads otherwise, and which choices,
    or '' where none is fragile."""
    rows = _rows(verdicts)
    dec = rows[rows["verdict"].isin([claims.HOLDS, claims.FAILS])]
    frag = dec["fragile"].fillna("").astype(str) if "fragile" in dec else pd.Series("", index=dec.index)
    k = int((frag != "").sum())
    if not k:
        return ""
    which = Counter(c.split(":")[0].strip() for f in frag[frag != ""] for c in f.split("; "))
    named = ", ".join(f"{c} ({n})" for c, n in which.most_common())
    return (f"{claims.of(k, len(dec), 'decided row')} {'is' if k == 1 else 'are'} fragile: another reasonable "
            f"analysis choice reads {'it' if k == 1 else 'them'} otherwise ({named}).")


def findings(verdicts: pd.DataFrame) -> list[str]:
    """Everything the page's first screen says of the verdicts, sentence by sentence: what does not
    hold, what holds (and how much of it is fragile), what stays inconclusive, and why the rest are
    not testable."""
    if _rows(verdicts).empty:
        return []
    out = claim_sentences(verdicts)
    if not _rows(verdicts)["verdict"].isin([claims.HOLDS, claims.FAILS]).any():
        out.insert(0, f"No claim was decided: none of the {claims.count(len(_rows(verdicts)), 'row')} holds or does not hold.")
    return [s for s in (*out, fragile_sentence(verdicts), inconclusive_sentence(verdicts), untestable_sentence(verdicts))
            if s]


def index_line(verdicts: pd.DataFrame) -> str:
    """The index's line: the failing claims' sentences whole, the holding ones counted with their
    words, and why the rest are not testable where they are most rows."""
    rows = _rows(verdicts)
    if rows.empty:
        return ""
    said = claim_sentences(verdicts)
    fails = [s for s in said if " does not hold" in s]
    holding = [s for s in said if " does not hold" not in s]
    out = list(fails)
    if 0 < len(holding) <= 2:
        out += holding
    elif holding:
        names = [s.split("” ", 1)[0] + "”" for s in holding]
        out.append(f"{'It' if not fails else 'Elsewhere it'} confirms {claims.count(len(holding), 'claim')} wherever "
                   f"decided: " + "; ".join(dict.fromkeys(names)) + ".")
    if not rows["verdict"].isin([claims.HOLDS, claims.FAILS]).any():
        out.append(f"No claim was decided: none of the {claims.count(len(rows), 'row')} holds or does not hold.")
    if (rows["verdict"] == claims.NOT_TESTABLE).mean() > 0.5:
        out.append(untestable_sentence(verdicts))
    return " ".join(out)
