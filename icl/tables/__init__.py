"""The tables rule: the logged arrays as parquet tables (build), the per-run measurements (measures) and
the phases counted on the logits (phases)."""
