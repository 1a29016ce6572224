"""Pure: an epoch's document permutation, a keyed Feistel bijection on [0, n) evaluated on demand.

``FeistelPermutation(size, key)`` maps positions to documents without storing the
permutation (O(1) memory: six 64-bit round keys), vectorised over numpy arrays, so the
first documents of a 10^8-document epoch are known without drawing the other 10^8.

Construction: the smallest power of two ``2^b >= size`` is split into a high half of
``ceil(b/2)`` bits and a low half of ``floor(b/2)`` bits; each of ``ROUNDS`` rounds xors
into one half a keyed 64-bit mix of the other (an alternating, possibly unbalanced,
Feistel network: every round is invertible, so the whole is a bijection on [0, 2^b)).
Values that land in [size, 2^b) are encrypted again until they fall inside (cycle
walking), which keeps it a bijection on [0, size); since 2^b < 2 size, fewer than two
evaluations per position are needed on average.

The key of an epoch comes from ``loaders.read.seeding.derive_seed`` in this module's domain,
keyed by (seed, epoch) only (``epoch_permutation``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from loaders.validate import check_int
from loaders.read.seeding import derive_seed

__all__ = ["DOMAIN_PERMUTATION", "ROUNDS", "FeistelPermutation", "epoch_permutation"]

DOMAIN_PERMUTATION = 0x5346_5045_524D_5431  # "SFPERMT1"
ROUNDS = 6  # four rounds already make a pseudo-random permutation (Luby-Rackoff); two more for margin

_MUL_1 = np.uint64(0xBF58_476D_1CE4_E5B9)  # splitmix64's finaliser constants
_MUL_2 = np.uint64(0x94D0_49BB_1331_11EB)
_SHIFT_30 = np.uint64(30)
_SHIFT_27 = np.uint64(27)
_SHIFT_31 = np.uint64(31)


def _mix(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """splitmix64's finaliser of ``values ^ key`` (uint64 [m], wrapping arithmetic)."""
    z = values ^ key
    z ^= z >> _SHIFT_30
    z *= _MUL_1
    z ^= z >> _SHIFT_27
    z *= _MUL_2
    z ^= z >> _SHIFT_31
    return z


@dataclass(frozen=True)
class FeistelPermutation:
    """A bijection on [0, size) from a 64-bit key; ``perm(positions)`` -> int64 values, same shape.

    size: number of documents (>= 0); key: any int, taken modulo 2^64.
    """

    size: int
    key: int
    _low_bits: int = field(init=False, repr=False)
    _high_bits: int = field(init=False, repr=False)
    _round_keys: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("size", self.size, 0)
        bits = max(2, (self.size - 1).bit_length())
        object.__setattr__(self, "_low_bits", bits // 2)
        object.__setattr__(self, "_high_bits", bits - bits // 2)
        keys = tuple(derive_seed(DOMAIN_PERMUTATION, self.key, r) for r in range(ROUNDS))
        object.__setattr__(self, "_round_keys", keys)

    def _encrypt(self, values: np.ndarray) -> np.ndarray:
        """One pass of the Feistel network over [0, 2^b): uint64 [m] -> uint64 [m]."""
        low_bits = np.uint64(self._low_bits)
        low_mask = np.uint64((1 << self._low_bits) - 1)
        high_mask = np.uint64((1 << self._high_bits) - 1)
        high = values >> low_bits
        low = values & low_mask
        for r, key in enumerate(self._round_keys):
            if r % 2 == 0:
                high ^= _mix(low, np.uint64(key)) & high_mask
            else:
                low ^= _mix(high, np.uint64(key)) & low_mask
        return (high << low_bits) | low

    def __call__(self, positions: np.ndarray | int) -> np.ndarray:
        """The documents at ``positions`` (ints in [0, size)): int64 array of the same shape."""
        flat = np.asarray(positions, dtype=np.int64).reshape(-1)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self.size):
            raise IndexError(f"positions must lie in [0, {self.size}) (got {int(flat.min())}..{int(flat.max())})")
        out = self._encrypt(flat.astype(np.uint64))
        outside = np.flatnonzero(out >= np.uint64(self.size))
        while outside.size:  # cycle walking: at most a handful of rounds for nearly every position
            again = self._encrypt(out[outside])
            out[outside] = again
            outside = outside[again >= np.uint64(self.size)]
        return out.astype(np.int64).reshape(np.shape(positions))


def epoch_permutation(size: int, seed: int, epoch: int) -> FeistelPermutation:
    """Epoch ``epoch``'s permutation of ``size`` documents under ``seed``: a function of (seed, epoch) only."""
    return FeistelPermutation(size, derive_seed(DOMAIN_PERMUTATION, check_int("seed", seed, 0),
                                                check_int("epoch", epoch, 0)))
