"""The delay line's PRNG (pure): xoshiro256** seeded through splitmix64, the same generator as the compiled
engine's (`_engine.c`), so one seed gives the same loss / jitter / reorder draws in both engines.

- seeding: `seed64(seed)`: None -> 8 bytes of os.urandom; anything else -> the first 8 bytes (little-endian) of
  BLAKE2b(str(seed)) (stable across processes and machines, unlike hash()). The four state words are the first
  four outputs of splitmix64 started at seed64.
- `random()`: the top 53 bits of the next output times 2**-53 (uniform in [0, 1)).
- `uniform(a, b)`: a + (b - a) * random()  (as random.Random.uniform).
- `gauss(mu, sigma)`: Box-Muller without caching, u1 then u2: mu + sigma * sqrt(-2 ln(1 - u1)) cos(2 pi u2).
The compiled engine does the same double operations in the same order (built with -ffp-contract=off), and both
use the platform libm for log and cos, so the draws are bit-identical.
"""
from __future__ import annotations

import hashlib
import math
import os

M64 = (1 << 64) - 1
TWO_PI = 2.0 * math.pi
_INV53 = 2.0 ** -53


def seed64(seed) -> int:
    if seed is None:
        return int.from_bytes(os.urandom(8), "little")
    return int.from_bytes(hashlib.blake2b(str(seed).encode(), digest_size=8).digest(), "little")


def splitmix64(x: int) -> tuple[int, int]:
    """(next state, output)."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return x, z ^ (z >> 31)


class Xoshiro:
    """xoshiro256** (Blackman and Vigna), with the subset of random.Random the model uses."""

    __slots__ = ("s0", "s1", "s2", "s3")

    def __init__(self, seed=None):
        x = seed64(seed)
        out = []
        for _ in range(4):
            x, z = splitmix64(x)
            out.append(z)
        self.s0, self.s1, self.s2, self.s3 = out

    def next64(self) -> int:
        s0, s1, s2, s3 = self.s0, self.s1, self.s2, self.s3
        r = (s1 * 5) & M64
        r = (((r << 7) | (r >> 57)) & M64) * 9 & M64
        t = (s1 << 17) & M64
        s2 ^= s0
        s3 ^= s1
        s1 ^= s2
        s0 ^= s3
        s2 ^= t
        s3 = ((s3 << 45) | (s3 >> 19)) & M64
        self.s0, self.s1, self.s2, self.s3 = s0, s1, s2, s3
        return r

    def random(self) -> float:
        return (self.next64() >> 11) * _INV53

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * self.random()

    def gauss(self, mu: float, sigma: float) -> float:
        u1 = self.random()
        u2 = self.random()
        return mu + sigma * (math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(TWO_PI * u2))
