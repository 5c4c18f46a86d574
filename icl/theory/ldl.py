"""LDL's threshold between the flat and the sharp Lipschitz regimes (unit constants inside Θ)."""
from __future__ import annotations

import math


def delta_conc(K: int, N: int) -> float:
    """δ = sqrt(20K/N): the concentration width of feature counts in a prompt (LDL §4)."""
    return math.sqrt(20.0 * K / N)


def L_star(K: int, N: int, delta: float) -> float:
    """L* = 1/(Δδ): flat regime for L <= L*, sharp for L > L*."""
    return 1.0 / (delta * delta_conc(K, N))
