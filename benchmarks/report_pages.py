"""What a reader's browser gets from each report page (issue 30.3): per page its file size, its
height and the y of its first figure in pixels, opened in headless Chromium at a width of 1400 px
(Debian's /usr/bin/chromium driven by playwright, as tests/test_browser.py does). Prints a table.

    .venv/bin/python benchmarks/report_pages.py reports          # or any folder of *.html
"""
from __future__ import annotations

import argparse
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
MEASURE = """async () => {
  await Promise.all([...document.images].map(i => i.decode().catch(() => null)));
  const img = document.querySelector('figure img') || document.querySelector('img');
  return {height: document.documentElement.scrollHeight, images: document.images.length,
          first: img ? Math.round(img.getBoundingClientRect().top + window.scrollY) : null};
}"""


def measure(folder: Path) -> list[dict]:
    """One row per *.html of `folder`: name, KB, page height, first figure's y, images."""
    from playwright.sync_api import sync_playwright
    rows = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.route(lambda url: not url.startswith(("file:", "data:")), lambda route: route.abort())
        for f in sorted(folder.glob("*.html")):
            page.goto(f.resolve().as_uri(), wait_until="load")
            rows.append({"page": f.name, "kb": f.stat().st_size / 1024, **page.evaluate(MEASURE)})
        browser.close()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a reports folder")
    rows = measure(ap.parse_args().folder)
    print(f"{'page':<24}{'KB':>9}{'height px':>11}{'1st fig y':>11}{'images':>8}")
    for r in rows:
        first = "—" if r["first"] is None else str(r["first"])
        print(f"{r['page']:<24}{r['kb']:>9.0f}{r['height']:>11}{first:>11}{r['images']:>8}")
    print(f"{'total':<24}{sum(r['kb'] for r in rows):>9.0f}")


if __name__ == "__main__":
    main()
