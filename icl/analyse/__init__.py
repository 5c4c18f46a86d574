"""The analyse rule: slopes, stability and verdicts (verdicts), the fits of convergence times (fits) and
every claim (claims)."""
