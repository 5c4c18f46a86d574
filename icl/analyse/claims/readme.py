"""The verdict table of docs/claims.md, made from the claim functions themselves (`icl claims`):
what a reader sees is the first paragraph of the docstring of the function that judges the claim.
(It was the README's until issue 30 moved the reference into docs/; the names stayed.)"""
from __future__ import annotations

from icl.analyse.claims import ldl, zfb


def rules() -> dict[str, str]:
    """What each claim function judges, in the words of the first paragraph of its docstring: the
    verdict table of docs/claims.md is this (`icl claims`), so the two cannot drift apart."""
    out = {}
    for module in (ldl, zfb):
        for cid, fn in getattr(module, "RULES", {}).items():
            out[cid] = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
    return out


def readme_table() -> str:
    """The verdict table of docs/claims.md: claim id and the rule that judges it."""
    lines = ["| claim_id | what is judged |", "|---|---|"]
    bar = "\\|"
    lines += [f"| `{cid}` | {text.replace('|', bar)} |" for cid, text in rules().items()]
    return "\n".join(lines)
