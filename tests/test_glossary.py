"""Every symbol defined at its first use (issue 62.6): the first use of each symbol in a page's prose
links to its definition in the page's list of symbols; later uses, figures, scripts, links and
headings are left alone; the list holds what the page uses, in order."""
import re

from icl.report.glossary import SYMBOLS, link_symbols, with_symbols

PAGE = ("<html><head><title>δ and L</title><style>.x{}</style></head><body>"
        "<h1>Flat below L*</h1>"
        "<p>The runs at N = 1600 have δ = sqrt(20K/N) &lt; min p_k; L = 0.5 is below L* = 1/(Δδ).</p>"
        "<svg><text>δ</text></svg><script>if (a<b) { x = 'δ'; }</script>"
        "<p>Again δ, and <a href='#x'>η in a link</a>, then η; Λ_τ is a covariance, τ the clock.</p>"
        "</body></html>")


def _links(html):
    return re.findall(r'<a class="sym" href="#sym-(\w+)"[^>]*>([^<]*)</a>', html)


def test_the_first_use_of_each_symbol_is_linked_once_in_order():
    html, used = link_symbols(PAGE)
    got = _links(html)
    assert [t for _, t in got] == ["N", "δ", "p_k", "L", "L*", "Δ", "η", "Λ", "τ"], got
    assert [s.term for s in used] == ["N", "δ", "p_k", "L", "L*", "Δ", "η", "Λ", "τ"]
    # the heading, the title, the figure, the script and the link keep their text as it was
    assert "<h1>Flat below L*</h1>" in html and "<title>δ and L</title>" in html
    assert "<svg><text>δ</text></svg>" in html and "<script>if (a<b) { x = 'δ'; }</script>" in html
    assert "<a href='#x'>η in a link</a>" in html
    assert "</a>_τ is" in html and ">τ</a> the clock" in html                         # ZFB's per-prompt index is not the clock


def test_the_page_lists_what_it_uses_each_the_target_of_its_link():
    page = with_symbols(PAGE)
    targets = re.findall(r'<dt id="sym-(\w+)">', page)
    assert targets == [k for k, _ in _links(page)]
    assert page.index('<section id="symbols">') > page.index("Again δ") and page.endswith("</body></html>")
    # nothing but the links and the list was added
    stripped = re.sub(r'<a class="sym"[^>]*>([^<]*)</a>', r"\1", page.split('<section id="symbols">')[0])
    assert stripped + "</body></html>" == PAGE


def test_every_symbol_matches_how_it_is_written_and_not_inside_other_words():
    import re as _re
    for s in SYMBOLS:
        assert _re.search(s.pattern, f"at {s.term} = 1"), s.key
    html, used = link_symbols("<body><p>LayerNorm, KL, Nesterov, O(1/K²), MSE</p></body>")
    assert [s.key for s in used] == [], used
