"""What a run of a kind costs in memory, asked of its class with a run's spec and no torch: what the
planner cuts shards by, a job asks its scheduler for and the estimate prints. benchmarks/memory.py
measures each kind at the paper's shapes against it."""
from __future__ import annotations

from icl.settings import Tokens, Train


class Memory:
    """The memory model every kind inherits (icl.models.Model is one) and overrides in parts:
    `step_floats`, `forward_floats`, `cache_floats`, `n_params`, `log_matrix_floats`, `ensemble_cap`."""

    # Memory (bytes of one run inside a training ensemble; benchmarks/memory.py measures each kind
    # at the paper's shapes against the slope of the peak RSS over two shard sizes). The parts:
    # the prompts as the model holds them, each split's per-prompt floats (`prompt_floats`) plus
    # the token sequences a model caches for the two batches it saw last (`cache_floats`); the
    # larger of a training step's activations (`step_floats` per prompt of the batch) and a no-
    # gradient forward's (chunked where a kind would otherwise hold more: then a constant of the
    # job, not of the run); the parameters with their gradient and optimizer state; the logs and
    # the every-epoch trace (float64). What does not grow with the runs (Python, torch, one group
    # of prompts being prepared, a chunk of a forward) is the job's base, not counted here.

    @staticmethod
    def _prompts(spec: dict) -> dict:
        p, tok, tr = spec["prompts"], Tokens.of(spec["tokens"]), Train.of(spec["train"])
        return {"train": p["train"], "test": p["test"], "batch": tr.batch_size or p["train"],
                "fresh": tr.fresh, "N": p["N"], "T": p["N"] + 1, "d": tok.d, "K": tok.K}

    @classmethod
    def prompt_floats(cls, spec: dict, diagnose: bool) -> float:
        """Floats (4 bytes) one prompt holds in the token form: x and y, and where prompts are
        prepared with diagnostics (the fixed training prompts) the query's nearest tokens (int64)
        and, for discrete tokens, every token's feature (int64), whether it is the query's, and
        the query's one-hot."""
        s = cls._prompts(spec)
        out = s["T"] * (s["d"] + 1)
        if diagnose:
            out += 2 * max(1, s["N"] // 10) + (2 * s["T"] + s["N"] + s["K"] if s["K"] else 0)
        return out

    @classmethod
    def cache_floats(cls, spec: dict) -> float:
        """Floats per prompt of the token sequence a kind caches for a batch it reads again."""
        return 0

    @classmethod
    def step_floats(cls, spec: dict) -> float:
        """Floats per prompt of the batch that a training step holds at its peak."""
        return 3 * cls._prompts(spec)["N"]

    @classmethod
    def forward_floats(cls, spec: dict) -> float:
        """Floats per test prompt of a forward without gradients (0 where it is chunked)."""
        return 0

    @classmethod
    def n_params(cls, spec: dict) -> int:
        return 0

    @classmethod
    def train_bytes(cls, spec: dict) -> int:
        """Peak memory of one run inside a training ensemble (see the comment above): what the
        planner cuts shards by and a job asks its scheduler for."""
        s = cls._prompts(spec)
        held = s["train"] * cls.prompt_floats(spec, True) + s["test"] * cls.prompt_floats(spec, False)
        seen = [s["train"], s["test"]]
        if s["fresh"]:                         # this epoch's new prompts, and their cache
            held += s["train"] * cls.prompt_floats(spec, False)
            seen.append(s["train"])
        elif s["batch"] < s["train"]:          # a minibatch taken from the training prompts
            held += s["batch"] * cls.prompt_floats(spec, True)
            seen.append(s["batch"])
        held += sum(sorted(seen)[-2:]) * cls.cache_floats(spec)          # the last two batches' caches
        copies = 5 if spec["model"]["optimizer"] == "adam" else 3       # value, gradient, (moments), update
        passes = max(s["batch"] * cls.step_floats(spec), s["test"] * cls.forward_floats(spec))
        llc = Train.of(spec["train"]).llc
        if llc:     # an SGLD step: every chain a row of its own, on its minibatch; the chains' weights and centre
            together = len(llc.passes()[0])
            passes = max(passes, together * llc.minibatch(s["train"]) * cls.step_floats(spec))
            copies += 3 * together
        return int(4 * (held + passes) + 4 * copies * cls.n_params(spec) + cls.log_bytes(spec))

    @classmethod
    def ensemble_cap(cls, spec: dict) -> int | None:
        """Most runs a shard should step together on a CPU, where more would be slower per run
        than a loop over them (the plan cuts shards to it unless `device: cuda`); None: no cap."""
        return None

    @classmethod
    def log_bytes(cls, spec: dict) -> int:
        """The logs (float64, every logged epoch) and the trace (every epoch: three losses, the own
        attention, softmax_q's K×K logits) of one run."""
        tr, s = spec["train"], cls._prompts(spec)
        logged = tr["epochs"] // tr["log_every"] + 2
        K2 = (s["K"] or 0) ** 2
        per_log = 6 + K2 + cls.log_matrix_floats(spec)
        return 8 * (logged * per_log + (tr["epochs"] + 1) * (4 + K2))

    @classmethod
    def log_matrix_floats(cls, spec: dict) -> int:
        """Floats a logged epoch holds beyond the curves and one K x K map (matrices, per-head maps)."""
        return 0

    @classmethod
    def eval_bytes(cls, spec: dict, width: int = 1) -> int:
        """Rough peak memory of evaluating one run on its largest cell: the prompts in float64
        (numpy) and float32 (torch), the baselines' per-prompt d×d systems and the forward pass."""
        ev, d = spec["evaluate"], spec["tokens"]["d"]
        P, n_tok = ev["prompts"], max(ev["lengths"]) + 1
        data = P * n_tok * (d + 1) * (8 + 4) + P * d * d * 8 * 4
        return data + 4 * P * n_tok * (d + 2 + 2 * width)
