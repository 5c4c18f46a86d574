"""A counter-based random stream per run, drawn for all runs of an ensemble in one call, on any device.

Fresh training prompts are drawn where the model trains, every step, for every run at once. A run's
numbers must not depend on the shard or chunk it trains in, nor on the device: so every value is a
hash of (the run's key, its place in the draw), not the next state of a shared generator. The key is
made of the run's seed, the stream (epoch) and what is drawn (`purpose`); the hash is Chris Wellons'
`triple32` (bias 0.021, a full-avalanche 32-bit permutation), applied twice with two key words
between, all on the device (no copy from the host inside a step), computed in int64 with every product kept below 2^49, so the integers are exactly the same
on a CPU and on CUDA. Uniforms take the top 24 bits; normals are Box-Muller in float64 and then
rounded to the caller's dtype, so the two devices agree to float64 rounding before that.
"""
from __future__ import annotations

import math

import torch

MASK = 0xFFFFFFFF
_TRIPLE32 = ((17, 0xED5AD4BB), (11, 0xAC4C1B51), (15, 0x31848BAB))


def _mul(x: torch.Tensor, c: int) -> torch.Tensor:
    """x·c mod 2^32 for x in [0, 2^32): the constant split in 16-bit halves, no product past 2^49."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK


def triple32(x: torch.Tensor) -> torch.Tensor:
    """Wellons' triple32 hash of 32-bit values held in int64."""
    for shift, c in _TRIPLE32:
        x = _mul(x ^ (x >> shift), c)
    return x ^ (x >> 14)


def run_keys(seeds: torch.Tensor, stream, purpose: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two 32-bit key words of each run's draw `purpose` in stream `stream` (an epoch), from the
    runs' seeds (an int64 tensor on the draw's device: the keys are made there, with no copy from
    the host, which on CUDA would wait for the queued steps)."""
    a = triple32((seeds & MASK) ^ (stream & MASK))
    a = triple32(a ^ (((stream >> 32) + 0x9E3779B9) & MASK))
    k0 = triple32(a ^ purpose)
    return k0, triple32(k0 ^ 0x85EBCA6B ^ purpose)


CHUNK = 2**22     # values a draw makes at once over all runs: bounds its transient memory (~40 bytes a value)


class Stream:
    """The draws of one stream (an epoch) for every run of an ensemble: `seeds` (R,) an int64 tensor
    on the device drawn on. Each call names its purpose (a small integer), so that what one draw
    takes never shifts another's numbers, and its shape per run; the result has a leading run axis.
    A draw is made in spans of its counters (CHUNK values over all runs at a time): the same
    numbers as at once, with temporaries that do not grow with the draw."""

    def __init__(self, seeds: torch.Tensor, stream):
        """`stream`: an int, or a 0-dim int64 tensor on the seeds' device (what a compiled draw takes,
        so that it is not compiled again for every epoch)."""
        self.seeds, self.stream, self.device = seeds, stream, seeds.device

    def _keys(self, purpose: int):
        return tuple(k.view(-1, 1) for k in run_keys(self.seeds, self.stream, purpose))

    def _spans(self, n: int):
        step = max(1, CHUNK // max(1, self.seeds.shape[0]))
        return [(lo, min(n, lo + step)) for lo in range(0, n, step)]

    def _uniform64(self, keys, lo: int, hi: int) -> torch.Tensor:
        """U(0, 1) in float64 at counters lo..hi−1 of every run: (top 24 bits of the hash + ½) / 2^24."""
        k0, k1 = keys
        bits = triple32(triple32(torch.arange(lo, hi, dtype=torch.int64, device=self.device) ^ k0) ^ k1)
        return ((bits >> 8).to(torch.float64) + 0.5) * 2.0 ** -24

    def uniform(self, purpose: int, shape: tuple, dtype=torch.float32) -> torch.Tensor:
        """U(0, 1), never 0 or 1."""
        n, keys = math.prod(shape), self._keys(purpose)
        out = torch.empty(self.seeds.shape[0], n, dtype=dtype, device=self.device)
        for lo, hi in self._spans(n):
            out[:, lo:hi] = self._uniform64(keys, lo, hi)
        return out.view(-1, *shape)

    def normal(self, purpose: int, shape: tuple, dtype=torch.float32) -> torch.Tensor:
        """N(0, 1) by Box-Muller, in float64, then rounded to `dtype`: value 2i is r_i·cos θ_i and
        2i+1 is r_i·sin θ_i, with r_i from the uniform at counter i and θ_i from counter m + i
        (m = ⌈n/2⌉ pairs)."""
        n, keys = math.prod(shape), self._keys(purpose)
        m = (n + 1) // 2
        out = torch.empty(self.seeds.shape[0], m, 2, dtype=dtype, device=self.device)
        for lo, hi in self._spans(m):
            r = self._uniform64(keys, lo, hi).log_().mul_(-2.0).sqrt_()
            theta = self._uniform64(keys, m + lo, m + hi).mul_(2 * math.pi)
            out[:, lo:hi, 0] = r * theta.cos()
            out[:, lo:hi, 1] = r.mul_(theta.sin_())
        return out.view(-1, 2 * m)[:, :n].reshape(-1, *shape)

    def exponential(self, purpose: int, shape: tuple, dtype=torch.float32) -> torch.Tensor:
        """Exp(1): −log U."""
        n, keys = math.prod(shape), self._keys(purpose)
        out = torch.empty(self.seeds.shape[0], n, dtype=dtype, device=self.device)
        for lo, hi in self._spans(n):
            out[:, lo:hi] = self._uniform64(keys, lo, hi).log_().neg_()
        return out.view(-1, *shape)
