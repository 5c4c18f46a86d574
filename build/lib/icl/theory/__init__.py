"""Closed-form predictions of the two papers: `ldl` (Li, Duan & Liang) and `lsa` (Zhang, Frei & Bartlett)."""
