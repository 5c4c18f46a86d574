"""Issue 35 item 7, "every reason's numbers equal the row's": the interval a reason quotes (judge's
"…'s interval [lo, hi]") and the one a ZFB measurement gives as judged over seeds ("judged over n
seeds: mean m [lo, hi]", or geometric mean) are the row's own value, ci_lo and ci_hi, as icl.analyse.claims.fmt prints them."""
from __future__ import annotations

import re

import pandas as pd

from icl.analyse.claims import fmt

REASON = re.compile(r"'s interval \[([^,\]]+), ([^\]]+)\]")
OVER_SEEDS = re.compile(r"judged over \d+ seeds: (?:geometric )?mean (\S+) \[([^,\]]+), ([^\]]+)\]")


def misquoted(rows) -> tuple[list[str], int]:
    """(every row whose reason or measurement quotes numbers other than its own, how many quoted any)."""
    rows = rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows
    bad, quoted = [], 0
    for r in rows:
        own = (fmt(r["value"]), fmt(r["ci_lo"]), fmt(r["ci_hi"]))
        if (m := REASON.search(str(r["reason"]))):
            quoted += 1
            if m.groups() != own[1:]:
                bad.append(f"{r['claim_id']} [{r['group']}]: reason {m.group(0)!r}, row {own}")
        if (m := OVER_SEEDS.search(str(r["measurement"]))):
            quoted += 1
            if m.groups() != own:
                bad.append(f"{r['claim_id']} [{r['group']}]: measurement {m.group(0)!r}, row {own}")
    return bad, quoted
