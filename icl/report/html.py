"""What every HTML page of the report is made with: the templates and an atomic write (a page is
whole or absent, never half written). Apart from page.py, so the index draws no figure module in."""
from __future__ import annotations

import os
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape

from icl.store.files import atomic_path

TEMPLATES = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"),
                        autoescape=select_autoescape(["html", "j2"]))


def write_text(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(text)
