"""What the tests pin of training: float32 matmuls and an eager step on every device. Their
comparisons are at float32's precision (an ensemble against each run alone, GD at (η, L) against
(ηL², 1), a resumed run against an unbroken one); on CUDA the defaults are TF32 and a compiled
step, whose numbers differ from float32's in the fourth digit (tests/test_fresh.py compares those)."""
PINNED = {"precision": "float32", "compile": False}
