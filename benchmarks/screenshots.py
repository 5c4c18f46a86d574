"""Screenshots of report pages as a reader's browser renders them (issue 50's before and after):
per page its first screen at 1400 x 900 and one figure (its k-th <figure>, the image alone), in
headless Chromium, the browser test's (benchmarks/report_pages.py finds it). Writes
OUT/<page>_first.png and OUT/<page>_figure<k>.png.

    .venv/bin/python benchmarks/screenshots.py /tmp/shots/after reports/zfb_gpt.html:2 reports/index.html
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_pages import FLAGS, HEIGHT, WIDTH, Unavailable, ensure_chromium, sync_playwright  # noqa: E402


def shoot(ctx, page_path: Path, k: int, out: Path) -> list[Path]:
    page = ctx.new_page()
    page.goto(page_path.resolve().as_uri())
    page.evaluate("async () => Promise.all([...document.images].map(i => i.decode().catch(() => null)))")
    first = out / f"{page_path.stem}_first.png"
    page.screenshot(path=str(first), full_page=False)
    shots = [first]
    figures = page.locator("figure img")
    if figures.count() >= k:
        shots.append(out / f"{page_path.stem}_figure{k}.png")
        figures.nth(k - 1).screenshot(path=str(shots[-1]))
    page.close()
    return shots


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="folder for the PNGs")
    p.add_argument("pages", nargs="+", help="report pages, each optionally PAGE:k for its k-th figure (default 1)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    try:
        chromium, playwright = ensure_chromium(), sync_playwright()
    except Unavailable as e:
        sys.exit(f"error: {e}")
    with playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), headless=True, args=FLAGS)
        ctx = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
        for spec in a.pages:
            path, _, k = spec.partition(":")
            if not Path(path).exists():
                sys.exit(f"error: no report page {path}")
            for shot in shoot(ctx, Path(path), int(k or 1), a.out):
                print(shot)
        browser.close()


if __name__ == "__main__":
    main()
