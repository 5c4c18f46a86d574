"""Figures as inline PNG: the reports embed every figure, so a report is one file."""
from __future__ import annotations

import base64
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def png(fig) -> str:
    """The figure as base64 PNG text (and closed, so long reports do not pile up figures)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()
