"""Every report of a tiny workflow opened in real headless Chromium, as a reader opens it: every
figure decodes, nothing is fetched from outside the file, the verdict tables are there, the index
links to each report, and the first screen renders. Each check also runs on a broken copy of a
report, so that a check which could never fail is caught.

Chromium is Debian's (installed with apt-get when missing); it is driven by the PyPI package
playwright (the test extra `make setup` installs) with executable_path=/usr/bin/chromium;
`playwright install` is never run. Both are found by benchmarks/report_pages.py, which measures
real pages with the same browser. Skipped where either cannot be had."""
import copy
import html as html_lib
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
from report_pages import FLAGS  # noqa: E402  (one browser for the test and the benchmark)

VIEWPORT = {"width": 1280, "height": 900}
VERDICTS = ("holds", "does not hold", "inconclusive", "not testable")
ALLOWED_SCHEMES = ("file:", "data:")
MAX_PAGE_BYTES = 3_000_000          # a report is sent as one file: a few MB at most (issue 36.3)
BROKEN_IMG = '<img alt="broken" src="data:image/png;base64,AAAA">'
EXTERNAL_IMG = '<img alt="external" src="http://example.com/x.png">'


# ---------------------------------------------------------------- browser and driver

def _browser():
    """The browser and its driver, found (or installed) as benchmarks/report_pages.py does; skipped
    where either cannot be had."""
    from report_pages import Unavailable, ensure_chromium, sync_playwright
    try:
        return ensure_chromium(), sync_playwright()
    except Unavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A Chromium context with a fresh profile; requests to the network are aborted (and recorded
    per page by `open_report`), so a stray URL fails fast instead of waiting on DNS."""
    chromium, sync_playwright = _browser()
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=str(chromium), headless=True, args=FLAGS,
            viewport=VIEWPORT)
        ctx.route(lambda url: not url.startswith(ALLOWED_SCHEMES), lambda route: route.abort())
        yield ctx
        ctx.close()


# ---------------------------------------------------------------- the tiny workflow

def snakemake(workdir, *args, timeout=600):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """An LDL experiment (tiny) and a ZFB one with an evaluate section (z), both small."""
    from conftest import TINY
    from test_evaluate import ZFB
    cfg = copy.deepcopy(TINY)
    tiny = cfg["experiments"]["tiny"]
    tiny["train"] = {"epochs": 6, "log_every": 2, "checkpoint_every": 6}
    z = copy.deepcopy(ZFB["experiments"]["z"])
    z["train"] = {"epochs": 10, "log_every": 5}
    z["sweep"] = {"seed": [0, 1]}
    cfg["experiments"]["z"] = z
    wd = tmp_path_factory.mktemp("wf")
    (wd / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(wd, "--cores", "2", "--configfile", str(wd / "cfg.yaml"))
    assert res.returncode == 0, res.stderr[-3000:]
    reports = sorted((wd / "reports").glob("*.html"))
    assert {p.name for p in reports} == {"index.html", "tiny.html", "z.html"}
    return wd


# ---------------------------------------------------------------- what a reader's browser sees

PAGE_STATE = """async () => {
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const verdictTables = [...document.querySelectorAll('table.verdict')].map(t => ({
    visible: t.checkVisibility(),
    rows: [...t.rows].filter(r => r.querySelector('td')).map(r => r.cells[r.cells.length - 1].textContent.trim()),
  }));
  const grids = [...document.querySelectorAll('table.verdict-grid')].map(t => ({
    visible: t.checkVisibility(),
    marks: [...t.querySelectorAll('.mark')].map(m => ({verdict: m.dataset.verdict, visible: m.checkVisibility(),
                                                       title: m.title})),
  }));
  const top = el => el ? Math.round(el.getBoundingClientRect().top + window.scrollY) : null;
  // the page's own blocks (headline, grid, tables, figures, headings, paragraphs) must not overlap:
  // every visible pair, one not inside the other, sharing more than a pixel each way is named
  const name = e => e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ')[0] : '') +
                    ' "' + (e.innerText || e.alt || '').trim().slice(0, 30) + '"';
  // a block inside a scrolling box (the verdict grid's) is seen only through that box: its box clipped
  const clipped = e => {
    let r = e.getBoundingClientRect(), top = r.top, bottom = r.bottom, left = r.left, right = r.right;
    for (let p = e.parentElement; p; p = p.parentElement) {
      if (!/(auto|scroll|hidden)/.test(getComputedStyle(p).overflow)) continue;
      const q = p.getBoundingClientRect();
      top = Math.max(top, q.top); bottom = Math.min(bottom, q.bottom);
      left = Math.max(left, q.left); right = Math.min(right, q.right);
    }
    return {top, bottom, left, right, width: right - left, height: bottom - top};
  };
  const blocks = [...document.querySelectorAll('h1, h2, h3, .headline, table, figure, img, p')]
    .filter(e => e.checkVisibility()).map(e => ({e, r: clipped(e)}))
    .filter(b => b.r.width > 0 && b.r.height > 0);
  const overlaps = [];
  for (let i = 0; i < blocks.length; i++) for (let j = i + 1; j < blocks.length; j++) {
    const a = blocks[i], b = blocks[j];
    if (a.e.contains(b.e) || b.e.contains(a.e)) continue;
    const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
    const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
    if (w > 1 && h > 1 && overlaps.length < 20) overlaps.push(`${name(a.e)} overlaps ${name(b.e)}`);
  }
  // each figure's CSV as the reader's click unpacks it (the page's own csvText, DecompressionStream)
  const csvs = [];
  for (const a of document.querySelectorAll('a[data-gz]')) {
    try { csvs.push({name: a.download, text: await csvText(a)}); }
    catch (e) { csvs.push({name: a.download, error: String(e)}); }
  }
  const headline = document.querySelector('.headline');
  const firstTable = [...document.querySelectorAll('table')].find(t => !t.closest('.headline'));
  return {
    grids, overlaps, headlineTop: top(headline), firstTableTop: top(firstTable),
    firstFigureTop: top(document.querySelector('figure img')), height: document.body.scrollHeight,
    images: [...document.images].map(i => ({alt: i.alt, src: i.currentSrc.slice(0, 60),
                                            complete: i.complete, w: i.naturalWidth, h: i.naturalHeight})),
    verdictTables, csvs,
    pageWidth: document.documentElement.scrollWidth, viewWidth: document.documentElement.clientWidth,
    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
    text: document.body.innerText,
  };
}"""


def open_report(ctx, path: Path, shot: Path) -> dict:
    """Open `path` via file://, record every request it makes, and screenshot the first screen."""
    page = ctx.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("websocket", lambda ws: requests.append(ws.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.resolve().as_uri(), wait_until="load")
        page.wait_for_load_state("networkidle")
        state = page.evaluate(PAGE_STATE)
        page.screenshot(path=str(shot), full_page=False)
    finally:
        page.close()
    return {**state, "requests": requests, "errors": errors, "url": path.resolve().as_uri()}


def bad_images(state) -> list:
    return [i for i in state["images"] if not i["complete"] or i["w"] == 0 or i["h"] == 0]


def outside_requests(state) -> list:
    return [u for u in state["requests"] if not u.startswith(ALLOWED_SCHEMES)]


def verdict_problems(state) -> list:
    """Empty when the page shows its verdict grid (claims × settings, every mark a verdict with its
    reason on hover) and keeps the full verdict tables (behind a toggle), every row ending in a verdict."""
    grids, tables = state["grids"], state["verdictTables"]
    problems = [] if grids else ["no verdict grid"]
    problems += [f"grid {k} hidden" for k, g in enumerate(grids) if not g["visible"]]
    problems += [f"grid {k} has no mark" for k, g in enumerate(grids) if not g["marks"]]
    problems += [f"grid {k}: {m['verdict']!r} is no verdict" for k, g in enumerate(grids) for m in g["marks"]
                 if m["verdict"] not in VERDICTS]
    problems += [f"grid {k}: a mark without its reason" for k, g in enumerate(grids)
                 if any(": " not in m["title"] for m in g["marks"])]
    if not tables:
        return problems + ["no table.verdict"]
    problems += [f"table {k} has no rows" for k, t in enumerate(tables) if not t["rows"]]
    problems += [f"table {k}: {v!r} is no verdict" for k, t in enumerate(tables)
                 for v in t["rows"] if not v.startswith(VERDICTS)]
    if not any(v in state["text"] for v in VERDICTS):
        problems.append("no verdict in the page's text")
    return problems


def width_problems(state) -> list:
    """Empty when the page does not scroll sideways (a wide table scrolls in its own box)."""
    return [] if state["pageWidth"] <= state["viewWidth"] else \
        [f"page scrolls sideways: {state['pageWidth']} px wide in a {state['viewWidth']} px window"]


def csv_problems(state, html: str) -> list:
    """Empty when every figure's embedded CSV unpacks in the browser to the whole table the page
    holds (gzip read independently here) with the drawn rows' header."""
    import base64
    import csv
    import gzip
    import io
    import re
    packed = dict(re.findall(r'<a class="data" download="([^"]+)" href="#" data-gz="([^"]*)"', html))
    found = [] if len(state["csvs"]) == len(packed) else [f"{len(state['csvs'])} CSV links, {len(packed)} in the file"]
    for c in state["csvs"]:
        if "error" in c:
            found.append(f"CSV {c['name']} does not unpack in the browser: {c['error']}")
            continue
        try:
            whole = gzip.decompress(base64.b64decode(packed[c["name"]])).decode()
        except (OSError, EOFError, KeyError, ValueError) as e:
            found.append(f"CSV {c['name']} is no gzip: {e}")
            continue
        if c["text"] != whole or not whole.startswith("panel,series,x,y"):
            found.append(f"CSV {c['name']}: {len(c['text'])} characters in the browser, {len(whole)} packed")
        rows = list(csv.reader(io.StringIO(whole)))
        if not whole.endswith("\n") or any(len(r) != len(rows[0]) for r in rows):
            found.append(f"CSV {c['name']} is cut short: its last row has {len(rows[-1])} of {len(rows[0])} fields")
    return found


def size_problems(path: Path) -> list:
    """Empty when the page weighs at most MAX_PAGE_BYTES."""
    size = path.stat().st_size
    return [] if size <= MAX_PAGE_BYTES else [f"page weighs {size / 1e6:.1f} MB, over {MAX_PAGE_BYTES / 1e6:g} MB"]


def missing_links(index_state, reports) -> list:
    return [p.name for p in reports if p.resolve().as_uri() not in index_state["links"]]


def png_problems(path: Path) -> list:
    """Empty when `path` is a PNG of the viewport's size with more than a header in it."""
    data = path.read_bytes() if path.exists() else b""
    if len(data) < 1000 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return [f"{path.name}: not a non-empty PNG ({len(data)} bytes)"]
    w, h = struct.unpack(">II", data[16:24])
    return [] if (w, h) == (VIEWPORT["width"], VIEWPORT["height"]) else [f"{path.name}: {w}x{h}"]


def check_all(ctx, reports_dir: Path, shots: Path) -> dict:
    """Every check on every reports/*.html, as {file name: [problems]}."""
    shots.mkdir(exist_ok=True)
    pages = sorted(reports_dir.glob("*.html"))
    experiments = [p for p in pages if p.name != "index.html"]
    problems = {}
    for p in pages:
        shot = shots / f"{p.stem}.png"
        st = open_report(ctx, p, shot)
        found = [f"image not decoded: {i}" for i in bad_images(st)]
        found += [f"request left the file: {u}" for u in outside_requests(st)]
        found += [f"script error: {e}" for e in st["errors"]]
        found += png_problems(shot)
        found += st["overlaps"]
        found += width_problems(st) + csv_problems(st, p.read_text()) + size_problems(p)
        if p.name == "index.html":
            found += [f"index does not link to {n}" for n in missing_links(st, experiments)]
        else:
            found += verdict_problems(st)
            if not st["images"]:
                found.append("no figure at all")
        problems[p.name] = found
    return problems


# ---------------------------------------------------------------- the tests

def test_every_report_opens_clean_in_chromium(browser, finished, tmp_path):
    problems = check_all(browser, finished / "reports", tmp_path / "shots")
    assert set(problems) == {"index.html", "tiny.html", "z.html"}
    assert problems == {k: [] for k in problems}, problems
    for name in ("index", "tiny", "z"):
        assert (tmp_path / "shots" / f"{name}.png").stat().st_size > 10_000
    for name in ("tiny", "z"):                   # missing values read "—", never pandas' <NA>
        assert "&lt;NA&gt;" not in (finished / "reports" / f"{name}.html").read_text(), name
        log = (finished / "logs" / name / "report.log").read_text()      # every figure passed the layout check
        assert "layout:" not in log, log


@pytest.fixture
def broken_copy(finished, tmp_path):
    """A copy of the reports directory to damage, and the damage to do."""
    dst = tmp_path / "reports"
    shutil.copytree(finished / "reports", dst)

    def edit(name, old, new, count=1):
        f = dst / name
        html = f.read_text()
        assert old in html, (name, old)
        f.write_text(html.replace(old, new, count))
    return dst, edit


def test_check_catches_an_undecodable_image(browser, broken_copy, tmp_path):
    dst, edit = broken_copy
    edit("tiny.html", "<h2>Runs</h2>", BROKEN_IMG + "<h2>Runs</h2>")
    problems = check_all(browser, dst, tmp_path / "shots")
    assert [m for m in problems["tiny.html"] if m.startswith("image not decoded") and "broken" in m], problems
    assert not any("request left" in m for m in problems["tiny.html"]), problems
    assert problems["z.html"] == [] and problems["index.html"] == []


def test_check_catches_a_request_leaving_the_file(browser, broken_copy, tmp_path):
    dst, edit = broken_copy
    edit("z.html", "<h2>Runs</h2>", EXTERNAL_IMG + "<h2>Runs</h2>")
    edit("index.html", "</head>", '<link rel="stylesheet" href="https://example.com/s.css"></head>')
    problems = check_all(browser, dst, tmp_path / "shots")
    assert "request left the file: http://example.com/x.png" in problems["z.html"], problems
    assert "request left the file: https://example.com/s.css" in problems["index.html"], problems
    assert problems["tiny.html"] == []


def test_check_catches_a_missing_or_wrong_verdict(browser, broken_copy, tmp_path):
    dst, edit = broken_copy
    edit("tiny.html", 'class="tbl verdict"', 'class="tbl"', count=-1)           # no verdict table left
    html = (dst / "z.html").read_text()
    first = html.index("<td><b>", html.index('class="tbl verdict"'))
    end = html.index("</b>", first)
    (dst / "z.html").write_text(html[:first] + "<td><b>probably fine" + html[end:])
    problems = check_all(browser, dst, tmp_path / "shots")
    assert "no table.verdict" in problems["tiny.html"], problems
    assert any("'probably fine' is no verdict" in m for m in problems["z.html"]), problems


def test_check_catches_a_hidden_verdict_grid(browser, broken_copy, tmp_path):
    dst, edit = broken_copy
    edit("z.html", "</head>", "<style>table.verdict-grid{display:none}</style></head>")
    edit("tiny.html", 'data-verdict="', 'data-verdict="probably ')
    problems = check_all(browser, dst, tmp_path / "shots")
    assert "grid 0 hidden" in problems["z.html"], problems
    assert any("is no verdict" in m and "probably" in m for m in problems["tiny.html"]), problems


def test_headline_first_and_first_figure_within_two_screens(browser, finished):
    """At a width of 1400 px each report opens with its headline box, before any table outside it,
    and its first figure starts within two screens (1800 px), the verdict detail folded below the grid."""
    page = browser.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    try:
        for name in ("tiny", "z"):
            page.goto((finished / "reports" / f"{name}.html").resolve().as_uri(), wait_until="load")
            st = page.evaluate(PAGE_STATE)
            assert st["headlineTop"] is not None and st["headlineTop"] < st["firstTableTop"], (name, st["headlineTop"])
            assert st["firstFigureTop"] is not None and st["firstFigureTop"] <= 1800, (name, st["firstFigureTop"])
    finally:
        page.close()


def test_check_catches_overlapping_blocks(browser, broken_copy, tmp_path):
    """A figure pulled up over the block before it, and a thumbnail over the index's text, are named."""
    dst, edit = broken_copy
    edit("tiny.html", "</head>", "<style>figure{margin-top:-120px}</style></head>")
    edit("index.html", "</head>", "<style>img.thumb{margin-right:-200px}</style></head>")
    problems = check_all(browser, dst, tmp_path / "shots")
    assert any(" overlaps " in m and "figure" in m for m in problems["tiny.html"]), problems
    assert any(" overlaps " in m and "img.thumb" in m for m in problems["index.html"]), problems
    assert problems["z.html"] == []


def test_check_catches_a_wide_page_a_broken_csv_and_a_heavy_page(browser, broken_copy, tmp_path):
    """A table outside its scrolling box that makes the page scroll sideways, a figure's CSV that
    no longer unpacks, one cut short, and a page over 3 MB are each named."""
    dst, edit = broken_copy
    edit("tiny.html", "<h2>Runs</h2>", '<table style="width:2600px"><tr><td>wide</td></tr></table><h2>Runs</h2>')
    edit("tiny.html", 'data-gz="', 'data-gz="AAAA')
    html = (dst / "z.html").read_text()
    start = html.index('data-gz="') + len('data-gz="')
    end = html.index('"', start)
    import base64
    import gzip
    whole = gzip.decompress(base64.b64decode(html[start:end]))
    cut = whole.rindex(b"\n", 0, len(whole) // 2) + 4                     # a few characters into a row
    short = base64.b64encode(gzip.compress(whole[:cut], mtime=0)).decode()
    (dst / "z.html").write_text(html[:start] + short + html[end:])
    edit("index.html", "</body>", "<!--" + "x" * MAX_PAGE_BYTES + "--></body>")
    problems = check_all(browser, dst, tmp_path / "shots")
    assert any(m.startswith("page scrolls sideways") for m in problems["tiny.html"]), problems
    assert any("does not unpack in the browser" in m for m in problems["tiny.html"]), problems
    assert any(m.startswith("CSV ") and "is cut short" in m for m in problems["z.html"]), problems
    assert any(m.startswith("page weighs") for m in problems["index.html"]), problems


def test_check_catches_an_index_without_a_link(browser, broken_copy, tmp_path):
    dst, edit = broken_copy
    edit("index.html", 'href="z.html"', 'href="zz.html"', count=-1)
    problems = check_all(browser, dst, tmp_path / "shots")
    assert problems["index.html"] == ["index does not link to z.html"], problems


def test_png_check_fails_on_empty_or_wrong_files(tmp_path):
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "text.png").write_text("not a png" * 200)
    assert png_problems(tmp_path / "empty.png") and png_problems(tmp_path / "text.png")
    assert png_problems(tmp_path / "absent.png")


def test_every_decided_row_links_to_its_evidence(finished, tmp_path):
    """Issue 62.2: each decided per-setting row of the verdict table links to a figure on its page
    that draws its value; the headline names claims by their words, never by their ids, and the
    prose check finds nothing on the first screen."""
    seen = 0
    for name in ("tiny", "z"):
        html = (finished / "reports" / f"{name}.html").read_text()
        v = pd.read_parquet(finished / "results" / name / "verdicts.parquet")
        decided = v[(v["scope"] == "setting") & v["verdict"].isin(["holds", "does not hold", "inconclusive"])
                    & v["value"].notna()]
        links = re.findall(r'<a class="evidence-link" href="#([^"]+)">', html)
        assert len(links) == len(decided), name
        seen += len(links)
        for a in set(links):
            assert f'<div id="{a}">' in html
        head = html.split('<div class="headline"', 1)[1].split("</div>", 1)[0]
        assert not re.search(r"\b(ldl|zfb)\.[a-z_]+", head.split('<details class="claim-counts-box"')[0]), head
        assert "prose:" not in html, name             # icl.report.prose found nothing to say of the first screen
    # and on a page with decided rows: tiny's verdicts with two rows decided as ldl_cosine's block rows were
    import json
    from icl.report.page import render
    res = tmp_path / "tiny"
    shutil.copytree(finished / "results/tiny", res)
    v = pd.read_parquet(res / "verdicts.parquet")
    rows = v[v["scope"] == "setting"].index[:2]
    v.loc[rows, ["verdict", "value", "ci_lo", "ci_hi", "prediction"]] = [
        ["holds", -1.24, -1.42, -1.07, "slope of log T on log L ≤ 0"],
        ["does not hold", 0.649, 0.284, 1.013, "slope of log T on log L ≤ 0"]]
    v.to_parquet(res / "verdicts.parquet")
    plan = json.loads((res / "plan.json").read_text())
    render("tiny", plan["config"], str(res), str(tmp_path / "tiny.html"))
    html = (tmp_path / "tiny.html").read_text()
    links = re.findall(r'<a class="evidence-link" href="#([^"]+)">', html)
    assert len(links) == 2 and all(f'<div id="{a}">' in html for a in links)
    assert seen + len(links) > 0


def test_every_symbol_a_page_uses_is_defined_at_its_first_use(finished):
    """Issue 62.6: on every page of a finished run the first use of δ, p_k, L*, K, N … in the prose
    links to the page's list of symbols, which defines each; a symbol written in the prose (outside
    figures, scripts and links) and not defined would fail here."""
    from icl.report.glossary import SYMBOLS
    for page in sorted((finished / "reports").glob("*.html")):
        html = page.read_text()
        assert '<section id="symbols">' in html, page.name
        prose = re.sub(r"<(script|style|svg|head|pre|code|title)\b.*?</\1\s*>", " ", html.split('<section id="symbols">')[0],
                       flags=re.S)
        prose = re.sub(r"<a\b[^>]*>.*?</a>", " ", prose, flags=re.S)        # what is linked already
        prose = re.sub(r"<(h[123]|th|button|option)\b.*?</\1>", " ", prose, flags=re.S)   # headings, column names
        text = html_lib.unescape(re.sub(r"<[^>]+>", " ", prose))
        defined = set(re.findall(r'<dt id="sym-(\w+)">', html))
        for s in SYMBOLS:
            if re.search(s.pattern, text):
                assert s.key in defined, (page.name, s.term)
        for key in defined:
            first = html.index(f'href="#sym-{key}"')
            assert first < html.index('<section id="symbols">'), (page.name, key)
