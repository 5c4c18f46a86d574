"""The evaluate rule: every trained model and baseline on shifted test prompts (cells), the shifts
(shifts) and the baselines (baselines)."""
