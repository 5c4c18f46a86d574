"""The report: one self-contained HTML page per experiment (icl.report.page) and an index
(icl.report.index), drawn from the tables and verdicts alone. Imports point one way: page reads
headline (what the page opens with), heads, ldl and zfb (their figures), which draw with figures
(the Figure type, palettes, layout checks), and index (the verdict counts both show); index reads
headline and html (templates, atomic writes) and draws nothing; figures imports none of them and
nothing here imports page or index but the command line."""
