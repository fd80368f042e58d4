"""A small bloom filter over xxhash for DiskRowSet key probes.

Written here rather than taken from a library: the needs are tiny (build once from a list of keys,
probe keys, serialise to bytes), xxhash is already a dependency, and building and batch probing use
numpy so only the hashing is per key (a C-level ``map``). ~10 bits per key with 7 probes gives about a
1% false-positive rate.
"""

from __future__ import annotations

import struct

import numpy as np
import xxhash

BITS_PER_KEY = 10
NUM_PROBES = 7
_HEADER = struct.Struct("<QI")


def key_hashes(keys: list[bytes]) -> np.ndarray:
    """xxh3-64 of every key (uint64), the input of :meth:`BloomFilter.may_contain_hashes`."""
    return np.fromiter(map(xxhash.xxh3_64_intdigest, keys), dtype=np.uint64, count=len(keys))


class BloomFilter:
    """Bit array probed by double hashing of xxh3-64; immutable once built."""

    def __init__(self, bits: np.ndarray, num_bits: int, num_probes: int = NUM_PROBES) -> None:
        self._bits = bits
        self._num_bits = num_bits
        self._num_probes = num_probes

    @classmethod
    def build(cls, keys: list[bytes], bits_per_key: int = BITS_PER_KEY) -> BloomFilter:
        num_bits = max(64, len(keys) * bits_per_key)
        bits = np.zeros((num_bits + 7) // 8, dtype=np.uint8)
        if keys:
            h = key_hashes(keys)
            h1 = h & np.uint64(0xFFFFFFFF)
            h2 = h >> np.uint64(32)
            for i in range(NUM_PROBES):
                pos = (h1 + np.uint64(i) * h2) % np.uint64(num_bits)
                np.bitwise_or.at(
                    bits,
                    (pos >> np.uint64(3)).astype(np.int64),
                    (np.uint8(1) << (pos & np.uint64(7)).astype(np.uint8)),
                )
        return cls(bits, num_bits)

    def may_contain(self, key: bytes) -> bool:
        """False means certainly absent; True means probably present."""
        h = xxhash.xxh3_64_intdigest(key)
        h1, h2 = h & 0xFFFFFFFF, h >> 32
        bits, n = self._bits, self._num_bits
        for i in range(self._num_probes):
            pos = (h1 + i * h2) % n
            if not bits[pos >> 3] & (1 << (pos & 7)):
                return False
        return True

    def may_contain_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """:meth:`may_contain` of many keys at once, given their :func:`key_hashes` (bool mask)."""
        h1 = hashes & np.uint64(0xFFFFFFFF)
        h2 = hashes >> np.uint64(32)
        n = np.uint64(self._num_bits)
        out = np.ones(len(hashes), dtype=bool)
        idx = np.arange(len(hashes))
        for i in range(self._num_probes):
            pos = (h1[idx] + np.uint64(i) * h2[idx]) % n
            bit = (self._bits[(pos >> np.uint64(3)).astype(np.int64)] >> (pos & np.uint64(7)).astype(np.uint8)) & 1
            miss = bit == 0
            if miss.any():
                out[idx[miss]] = False
                idx = idx[~miss]
                if not len(idx):
                    break
        return out

    def to_bytes(self) -> bytes:
        return _HEADER.pack(self._num_bits, self._num_probes) + self._bits.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> BloomFilter:
        num_bits, probes = _HEADER.unpack_from(data, 0)
        bits = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size)
        return cls(bits, num_bits, probes)
