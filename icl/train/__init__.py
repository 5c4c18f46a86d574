"""The train rule: the loop (loop), what it records (logs), how it resumes (checkpoints), the prompts it
draws (fresh, streams), the optimizers (optim) and the local learning coefficient (llc)."""
