"""What a reader's browser gets from each report page (issues 30.3, 36.3): per page its file size,
its height, the y of its first figure and its width in pixels (wider than the window: it scrolls
sideways), opened in headless Chromium at a width of 1400 px. The browser is the browser test's
(tests/test_browser.py imports it from here): Debian's /usr/bin/chromium (apt-get installs it when
missing and this runs as root), driven by playwright, which `make setup` installs (the test extra);
`playwright install` is never run. Prints a table.

    .venv/bin/python benchmarks/report_pages.py reports          # or any folder of *.html
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WIDTH, HEIGHT = 1400, 900
MEASURE = """async () => {
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const img = document.querySelector('figure img') || document.querySelector('img');
  const root = document.documentElement;
  return {height: root.scrollHeight, width: root.scrollWidth, view: root.clientWidth, images: document.images.length,
          first: img ? Math.round(img.getBoundingClientRect().top + window.scrollY) : null};
}"""


class Unavailable(RuntimeError):
    """Chromium or playwright cannot be had here (the message says why)."""


def ensure_chromium() -> Path:
    """/usr/bin/chromium, installed with apt-get first where it is missing and this is root."""
    if CHROMIUM.exists():
        return CHROMIUM
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        raise Unavailable(f"{CHROMIUM} is missing and installing it needs root (apt-get install chromium)")
    if shutil.which("apt-get") is None:
        raise Unavailable(f"{CHROMIUM} is missing and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise Unavailable(f"{' '.join(cmd)} failed: {e}") from e
        if res.returncode != 0:
            raise Unavailable(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-500:]}")
    if not CHROMIUM.exists():
        raise Unavailable(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


def sync_playwright():
    """playwright's sync_playwright, or Unavailable saying how to install it."""
    try:
        from playwright.sync_api import sync_playwright as sp
    except ImportError as e:
        raise Unavailable(f"playwright cannot be imported ({e}): run `make setup` (it installs the test extra)") from e
    return sp


def measure(folder: Path) -> list[dict]:
    """One row per *.html of `folder`: name, KB, page height and width, first figure's y, images."""
    chromium, sp = ensure_chromium(), sync_playwright()
    rows = []
    with sp() as p:
        browser = p.chromium.launch(executable_path=str(chromium), headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.route(lambda url: not url.startswith(("file:", "data:")), lambda route: route.abort())
        for f in sorted(folder.glob("*.html")):
            page.goto(f.resolve().as_uri(), wait_until="load")
            rows.append({"page": f.name, "kb": f.stat().st_size / 1024, **page.evaluate(MEASURE)})
        browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="e.g. .venv/bin/python benchmarks/report_pages.py reports")
    ap.add_argument("folder", type=Path, help="a reports folder")
    try:
        rows = measure(ap.parse_args().folder)
    except Unavailable as e:
        sys.exit(f"report_pages: {e}")
    print(f"{'page':<24}{'KB':>9}{'height px':>11}{'width px':>10}{'1st fig y':>11}{'images':>8}")
    for r in rows:
        first = "—" if r["first"] is None else str(r["first"])
        wide = f"{r['width']}{'!' if r['width'] > r['view'] else ''}"
        print(f"{r['page']:<24}{r['kb']:>9.0f}{r['height']:>11}{wide:>10}{first:>11}{r['images']:>8}")
    print(f"{'total':<24}{sum(r['kb'] for r in rows):>9.0f}")
    print(f"(width: the page's scroll width in a {WIDTH} px window; '!' where it is wider: it scrolls sideways)")


if __name__ == "__main__":
    main()
