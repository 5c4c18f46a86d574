"""A counter-based random stream per run, drawn for all runs of an ensemble in one call, on any device.

Fresh training prompts are drawn where the model trains, every step, for every run at once. A run's
numbers must not depend on the shard or chunk it trains in, nor on the device: so every value is a
hash of (the run's key, its place in the draw), not the next state of a shared generator. The key is
made of the run's seed, the stream (epoch) and what is drawn (`purpose`); the hash is Chris Wellons'
`triple32` (bias 0.021, a full-avalanche 32-bit permutation), applied twice with two key words
between, all on the device (no copy from the host inside a step), computed in int64 with every product kept below 2^49, so the integers are exactly the same
on a CPU and on CUDA. Uniforms take the top 24 bits; normals are Box-Muller in float64 and then
rounded to the caller's dtype, so the two devices agree to float64 rounding before that.

On a CPU the counters' hash, the bulk of a draw, is computed in numpy's uint32 arithmetic instead
(its products wrap mod 2^32: one multiply where the int64 form takes six operations), a cache-sized
block at a time: the same integers (test), several times faster, which matters for the small models
whose fresh prompts cost more than their steps (an LSA shard of zfb_fixed: 25 of 33 s drawing).
"""
from __future__ import annotations

import math

import numpy as np
import torch

MASK = 0xFFFFFFFF
_TRIPLE32 = ((17, 0xED5AD4BB), (11, 0xAC4C1B51), (15, 0x31848BAB))


def _mul(x: torch.Tensor, c: int) -> torch.Tensor:
    """x·c mod 2^32 for x in [0, 2^32): the constant split in 16-bit halves, no product past 2^49."""
    return (x * (c & 0xFFFF) + (((x * (c >> 16)) & 0xFFFF) << 16)) & MASK


def on_host(x: torch.Tensor) -> bool:
    """Whether x's hashes take the CPU's numpy form: x is in host memory (`.numpy()` a view, not a
    copy or a wait) and no torch.compile is tracing."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def triple32(x: torch.Tensor) -> torch.Tensor:
    """Wellons' triple32 hash of 32-bit values held in int64 (on a CPU in numpy's uint32)."""
    if on_host(x):
        u = x.numpy().astype(np.uint32)
        _triple32_np(u, np.empty_like(u))
        return torch.from_numpy(u.astype(np.int64))
    for shift, c in _TRIPLE32:
        x = _mul(x ^ (x >> shift), c)
    return x ^ (x >> 14)


def _triple32_np(x: np.ndarray, t: np.ndarray) -> None:
    """triple32 of uint32 values in place (t: scratch of x's shape), in numpy's wrapping arithmetic."""
    for shift, c in _TRIPLE32:
        np.right_shift(x, shift, out=t)
        np.bitwise_xor(x, t, out=x)
        np.multiply(x, np.uint32(c), out=x)
    np.right_shift(x, 14, out=t)
    np.bitwise_xor(x, t, out=x)


BLOCK = 2**15     # values hashed at once on a CPU: the block and its scratch stay in the core's cache


def uniform64_cpu(k0: torch.Tensor, k1: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """`Stream._uniform64` on a CPU: (top 24 bits of triple32(triple32(i ^ k0) ^ k1) + ½) / 2^24 for
    the counters i = lo..hi−1 of every run (k0, k1: (R, 1) int64 key words), the hash in uint32."""
    if hi > 2**32:
        raise ValueError(f"a draw of {hi} values a run is past the stream's 2^32 counters")
    a = k0.numpy().astype(np.uint32).reshape(-1, 1)
    b = k1.numpy().astype(np.uint32).reshape(-1, 1)
    counters = np.arange(lo, hi, dtype=np.int64).astype(np.uint32)
    R, n = len(a), hi - lo
    out = np.empty((R, n), np.float64)
    cols = min(n, BLOCK)
    rows = max(1, BLOCK // max(1, cols))
    x, t = np.empty(rows * cols, np.uint32), np.empty(rows * cols, np.uint32)
    for r0 in range(0, R, rows):
        for c0 in range(0, n, cols):
            r1, c1 = min(R, r0 + rows), min(n, c0 + cols)
            shape = (r1 - r0, c1 - c0)
            xb, tb = x[:math.prod(shape)].reshape(shape), t[:math.prod(shape)].reshape(shape)
            np.bitwise_xor(counters[c0:c1], a[r0:r1], out=xb)
            _triple32_np(xb, tb)
            np.bitwise_xor(xb, b[r0:r1], out=xb)
            _triple32_np(xb, tb)
            np.right_shift(xb, 8, out=xb)
            block = out[r0:r1, c0:c1]
            block[...] = xb
            block += 0.5
            block *= 2.0 ** -24
    return torch.from_numpy(out)


def run_keys(seeds: torch.Tensor, stream, purpose: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The two 32-bit key words of each run's draw `purpose` in stream `stream` (an epoch), from the
    runs' seeds (an int64 tensor on the draw's device: the keys are made there, with no copy from
    the host, which on CUDA would wait for the queued steps)."""
    a = triple32(triple32((seeds & MASK) ^ 0x2545F491))       # the seed hashed alone first: XORing it with the
    a = triple32(a ^ (stream & MASK))                           # stream made (seed s, epoch e) and (s ^ x, e ^ x)
    a = triple32(a ^ (((stream >> 32) + 0x9E3779B9) & MASK))    # one key, so seeds shared their fresh prompts
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
        if on_host(k0):
            return uniform64_cpu(k0, k1, lo, hi)
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
