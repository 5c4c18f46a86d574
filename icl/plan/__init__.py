"""The plan rule: the sweep's runs and their shards (shards), and what a plan will cost (estimate)."""
