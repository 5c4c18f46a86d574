"""The report: one self-contained HTML page per experiment and an index (icl.report.page), drawn
from the tables and verdicts alone. Imports point one way: page reads headline (what the page
opens with), heads, ldl and zfb (their figures), which draw with figures (the Figure type, palettes,
layout checks); figures imports none of them and nothing here imports page but the command line."""
