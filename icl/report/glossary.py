"""Every symbol a page uses, defined where the reader first meets it (issue 62.6): the first use of
each symbol in the page's prose links to its definition in the page's own list of symbols (and
carries it as a tooltip); the list holds the symbols the page uses, in the order it uses them.
Figures, scripts, code, links and headings are left as they are."""
from __future__ import annotations

import html as htmllib
import re
from typing import NamedTuple


class Symbol(NamedTuple):
    key: str           # the anchor: #sym-<key>
    pattern: str       # how it is written in prose (a regular expression)
    term: str          # how the list writes it
    means: str         # its definition, one sentence


SYMBOLS = [
    Symbol("Lstar", r"L\*", "L*", "the flat/sharp threshold of LDL, L* = 1/(Δδ): the flat regime is L ≤ L*, the sharp "
                                  "one L > L*"),
    Symbol("L", r"(?<![\w*])L(?![\w*²])", "L", "the Lipschitz constant of the task's functions"),
    Symbol("Delta", r"Δ", "Δ", "the distance between any two of the K feature vectors"),
    Symbol("delta", r"δ", "δ", "the spread of the feature counts in a prompt, δ = √(20K/N) (LDL): the theorems "
                               "assume δ below min p_k"),
    Symbol("p_k", r"\bp_k\b|\bp_?ₖ", "p_k", "the probability that a token is the k-th feature vector (1/K when "
                                          "uniform)"),
    Symbol("K", r"(?<![\w/])K(?![\w])", "K", "the number of feature vectors the tokens are drawn from"),
    Symbol("N", r"(?<![\w/])N(?![\w])", "N", "the number of tokens in a training prompt (its context length)"),
    Symbol("M", r"(?<![\w/])M(?![\w])", "M", "the length of a test prompt (ZFB: up to and beyond N)"),
    Symbol("eps", r"ε", "ε", "the accuracy a convergence time is read at, the loss as a share of where it started "
                             "(Theorems 1-2 assume K ≥ 1/ε)"),
    Symbol("eta", r"η", "η", "the learning rate, the step of gradient descent"),
    Symbol("tau", r"(?<![_\w])τ", "τ", "time on the collapse clock: epochs × η‖v‖⁴·E[(f(v_k) − f(v_k'))²], in which every L, Δ "
                             "and N of LDL's model follows one curve"),
    Symbol("T1", r"\bT1\b|T₁", "T1", "the end of Phase I, in epochs (LDL Prop. 2)"),
    Symbol("LLC", r"\bLLC\b", "LLC", "the local learning coefficient λ̂ (Lau et al.; Hoogland et al.): the "
                                     "effective dimension of the loss landscape around the weights, estimated by "
                                     "SGLD; its stages are the critical points of λ̂ against log t"),
    Symbol("lambda", r"λ̂", "λ̂", "the estimated local learning coefficient (LLC)"),
    Symbol("t_escape", r"\bt_escape\b", "t_escape", "the epoch at which the loss leaves its plateau near predicting 0"),
    Symbol("Gamma", r"Γ", "Γ", "ZFB's matrix (1 + 1/N)Λ + tr(Λ)/N·I; the trained LSA's effective matrix → Γ⁻¹"),
    Symbol("Lambda", r"Λ", "Λ", "the covariance of the tokens x"),
    Symbol("sigma", r"σ", "σ", "the scale of the LSA's initialisation (ZFB's assumption)"),
]
_FIND = [(s, re.compile(s.pattern)) for s in SYMBOLS]
# blocks whose text is not prose: passed through whole
_BLOCKS = re.compile(r"(<(script|style|svg|head|pre|code|textarea|title)\b.*?</\2\s*>)", re.S | re.I)
_TAGS = re.compile(r"(<!--.*?-->|<[^>]*>)", re.S)
_NOT_PROSE = {"a", "h1", "h2", "h3", "button", "option", "th"}      # a link inside a link or a heading: no


def _link(text: str, seen: dict) -> str:
    """`text` (escaped HTML text) with the first match of every symbol not yet seen linked."""
    found = []
    for s, rx in _FIND:
        if s.key not in seen and (m := rx.search(text)):
            found.append((m.start(), m.end(), s))
    out, at = [], 0
    for a, b, s in sorted(found):
        if a < at or s.key in seen:
            continue
        seen[s.key] = s
        out += [text[at:a], f'<a class="sym" href="#sym-{s.key}" title="{htmllib.escape(s.means)}">{text[a:b]}</a>']
        at = b
    return "".join(out) + text[at:]


def link_symbols(page: str) -> tuple[str, list[Symbol]]:
    """The page's body with the first use of each symbol linked, and the symbols it uses, in order."""
    start = page.find("<body")
    head, body = (page[:start], page[start:]) if start >= 0 else ("", page)
    seen: dict = {}
    out = []
    for i, block in enumerate(_BLOCKS.split(body)):
        if i % 3 == 2:                         # the tag name captured by the block's pattern
            continue
        if i % 3 == 1:
            out.append(block)
            continue
        depth = 0
        for part in _TAGS.split(block):
            if part.startswith("<"):
                name = re.match(r"</?\s*([A-Za-z0-9]+)", part)
                if name and name.group(1).lower() in _NOT_PROSE and not part.endswith("/>"):
                    depth += -1 if part.startswith("</") else 1
                out.append(part)
            else:
                out.append(part if depth > 0 else _link(part, seen))
    return head + "".join(out), list(seen.values())


def symbols_section(used: list[Symbol]) -> str:
    """The page's list of symbols, each the target of its first use's link."""
    if not used:
        return ""
    items = "".join(f'<dt id="sym-{s.key}">{htmllib.escape(s.term)}</dt><dd>{htmllib.escape(s.means)}.</dd>' for s in used)
    return f'<section id="symbols"><h2>Symbols</h2><dl class="symbols">{items}</dl></section>'


def with_symbols(page: str) -> str:
    """The page with every symbol's first use linked to the list of symbols, put before </body>."""
    linked, used = link_symbols(page)
    end = linked.rfind("</body>")
    section = symbols_section(used)
    return linked[:end] + section + linked[end:] if end >= 0 else linked + section
