"""Every report of a tiny workflow opened in real headless Chromium, as a reader opens it: every
figure decodes, nothing is fetched from outside the file, the verdict tables are there, the index
links to each report, and the first screen renders. Each check also runs on a broken copy of a
report, so that a check which could never fail is caught.

Chromium is Debian's (installed here with apt-get when missing); it is driven by the PyPI package
playwright with executable_path=/usr/bin/chromium (pip-installed when missing; `playwright install`
is never run). Skipped where either cannot be had."""
import copy
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
VERDICTS = ("holds", "does not hold", "inconclusive", "not testable")
ALLOWED_SCHEMES = ("file:", "data:")
BROKEN_IMG = '<img alt="broken" src="data:image/png;base64,AAAA">'
EXTERNAL_IMG = '<img alt="external" src="http://example.com/x.png">'


# ---------------------------------------------------------------- browser and driver

def _ensure_chromium():
    if CHROMIUM.exists():
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip(f"{CHROMIUM} is missing and installing it needs root")
    if shutil.which("apt-get") is None:
        pytest.skip(f"{CHROMIUM} is missing and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            pytest.skip(f"{' '.join(cmd)} failed: {e}")
        if res.returncode != 0:
            pytest.skip(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-500:]}")
    if not CHROMIUM.exists():
        pytest.skip(f"apt-get installed chromium but {CHROMIUM} is still missing")


def _import_playwright():
    try:
        from playwright.sync_api import sync_playwright
        return sync_playwright
    except ImportError:
        pass
    try:
        res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "playwright"],
                             capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"pip install playwright failed: {e}")
    if res.returncode != 0:
        pytest.skip(f"pip install playwright failed ({res.returncode}): {res.stderr[-500:]}")
    import importlib
    importlib.invalidate_caches()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        pytest.skip(f"playwright installed but cannot be imported: {e}")
    return sync_playwright


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    """A Chromium context with a fresh profile; requests to the network are aborted (and recorded
    per page by `open_report`), so a stray URL fails fast instead of waiting on DNS."""
    _ensure_chromium()
    sync_playwright = _import_playwright()
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=FLAGS,
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
  const headline = document.querySelector('.headline');
  const firstTable = [...document.querySelectorAll('table')].find(t => !t.closest('.headline'));
  return {
    grids, overlaps, headlineTop: top(headline), firstTableTop: top(firstTable),
    firstFigureTop: top(document.querySelector('figure img')), height: document.body.scrollHeight,
    images: [...document.images].map(i => ({alt: i.alt, src: i.currentSrc.slice(0, 60),
                                            complete: i.complete, w: i.naturalWidth, h: i.naturalHeight})),
    verdictTables,
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
