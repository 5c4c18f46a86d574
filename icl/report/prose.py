"""A page's prose checked for what a reader trips on (issue 62.6): a bracket or quote left open, a
sentence cut off, a plural after 1, a table's column name where words belong. The report lists what
it finds beside its layout problems; nothing here stops a page."""
from __future__ import annotations

import re

PAIRS = {"(": ")", "[": "]", "“": "”"}
PLURAL_AFTER_ONE = re.compile(r"(?<![\d.,])\b1 (runs|settings|stages|seeds|rows|claims|phases|values|epochs|models|"
                              r"steps|shards|figures|prompts)\b")
# the tables' column names that a sentence should say in words
RAW = re.compile(r"\b(t_rel_\w+|t_unif_\w+|t_abs_\w+|t_phase_one|final_(?:train|test)_loss|attn_own_final|"
                 r"clock_per_epoch|token_kind|task_kind|model_kind|lr_rule|n_phases|uniform_(?:train|test)_loss)\b")
CUT = re.compile(r"(?:[,;:(\[“]|\b(?:and|or|of|the|a|to|in|at|by|with))\s*$")


def unbalanced(text: str) -> list[str]:
    """Brackets and quotes opened and not closed (or closed and not opened) in `text`."""
    out = []
    for a, b in PAIRS.items():
        depth = 0
        for ch in text:
            depth += ch == a
            depth -= ch == b
            if depth < 0:
                break
        if depth:
            out.append(f"'{a}' left {'open' if depth > 0 else 'unopened'}")
    return out


def problems(sentence: str) -> list[str]:
    """What is wrong with one sentence of a page's prose (empty when nothing)."""
    s = sentence.strip()
    if not s:
        return []
    out = [f"{p}: {s[:80]}…" for p in unbalanced(s)]
    if CUT.search(s.rstrip(".")) or not s.endswith((".", "!", "?", ")", "”")):
        out.append(f"cut off: …{s[-60:]}")
    out += [f"a plural after 1 ('{m.group(0)}'): {s[:60]}…" for m in PLURAL_AFTER_ONE.finditer(s)]
    out += [f"a column name in prose ('{m.group(0)}'): {s[:60]}…" for m in RAW.finditer(s)]
    return out


def check(sentences: list[str]) -> list[str]:
    """Every problem of a list of sentences, each named with the sentence it is in."""
    return [p for s in sentences for p in problems(s)]


INSIDE = re.compile(r"\binside (?:the theorems'|LDL's|its) hypotheses\b(?! on)")


def against_hypotheses(description: str, statements: list[tuple[str, str]]) -> list[str]:
    """Where an experiment's description says its runs are inside the theorems' hypotheses and a
    setting's statement (analyse's setting_hypotheses) says one fails: the page would contradict
    itself (issue 62.3). One line per such setting, naming what fails."""
    if not INSIDE.search(description):
        return []
    out = []
    for setting, said in statements:
        fails = [re.split(r": | fails", p, maxsplit=1)[0] for p in said.split("; ") if " fails" in p or " is outside" in p]
        if fails:
            out.append(f"the description says 'inside the theorems' hypotheses', but at {setting or 'its runs'} "
                       f"{', '.join(fails)} {'fails' if len(fails) == 1 else 'fail'}")
    return out
