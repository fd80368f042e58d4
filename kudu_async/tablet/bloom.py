"""A small bloom filter for DiskRowSet key probes.

Written here rather than taken from a library: the needs are tiny (build once from the keys, probe
keys, serialise to bytes) and building and batch probing use numpy. ~10 bits per key with 7 probes
gives about a 1% false-positive rate.

Two key hashes: filters written with rowsets in Parquet use :func:`word_hash`, a multiply-xorshift
over the key's 8-byte words that numpy computes for a whole key column at once
(``key_arrays.word_hashes``, without the GIL and without a Python object per key); older filters use
xxh3-64 (one C call per key). The header's probe count field says which.
"""

from __future__ import annotations

import struct

import numpy as np
import xxhash

BITS_PER_KEY = 16
NUM_PROBES = 11
_HEADER = struct.Struct("<QI")
WORD_HASH = 1 << 16  # flag in the header's probe count field: the filter is over word_hash
_MASK = (1 << 64) - 1
M1, M2, M3 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def word_hash(key: bytes) -> int:
    """The hash ``key_arrays.word_hashes`` computes for a column of keys, for one key in Python."""
    n = len(key)
    h = (n * M1) & _MASK
    if n <= 8:  # one word: little-endian bytes read as an int are the zero-padded word
        h = ((h ^ int.from_bytes(key, "little")) * M2) & _MASK
        h ^= h >> 29
    else:
        rounds = (n + 7) // 8
        for w in struct.unpack(f"<{rounds}Q", key.ljust(rounds * 8, b"\0")):
            h = ((h ^ w) * M2) & _MASK
            h ^= h >> 29
    h ^= h >> 30
    h = (h * M2) & _MASK
    h ^= h >> 27
    h = (h * M3) & _MASK
    return h ^ (h >> 31)


def key_hashes(keys: list[bytes]) -> np.ndarray:
    """xxh3-64 of every key (uint64), the input of :meth:`BloomFilter.may_contain_hashes`."""
    return np.fromiter(map(xxhash.xxh3_64_intdigest, keys), dtype=np.uint64, count=len(keys))


class BloomFilter:
    """Bit array probed by double hashing of xxh3-64; immutable once built."""

    def __init__(self, bits: np.ndarray, num_bits: int, num_probes: int = NUM_PROBES, *, words: bool = False) -> None:
        self._bits = bits
        self._num_bits = num_bits
        self._num_probes = num_probes
        self.words = words  # over word_hash (else xxh3-64)

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

    @classmethod
    def from_word_hashes(cls, h: np.ndarray, bits_per_key: int = BITS_PER_KEY) -> BloomFilter:
        """A filter over keys given as their ``key_arrays.word_hashes``: vectorised end to end."""
        num_bits = max(64, len(h) * bits_per_key)
        flags = np.zeros(num_bits, dtype=bool)
        h1 = h & np.uint64(0xFFFFFFFF)
        h2 = h >> np.uint64(32)
        for i in range(NUM_PROBES):
            flags[((h1 + np.uint64(i) * h2) % np.uint64(num_bits)).astype(np.int64)] = True
        return cls(np.packbits(flags, bitorder="little"), num_bits, words=True)

    def may_contain(self, key: bytes) -> bool:
        """False means certainly absent; True means probably present."""
        h = word_hash(key) if self.words else xxhash.xxh3_64_intdigest(key)
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
        probes = self._num_probes | (WORD_HASH if self.words else 0)
        return _HEADER.pack(self._num_bits, probes) + self._bits.tobytes()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> BloomFilter:
        num_bits, probes = _HEADER.unpack_from(data, 0)
        bits = np.frombuffer(data, dtype=np.uint8, offset=_HEADER.size)
        if len(bits) * 8 < num_bits:
            raise ValueError(f"bloom filter of {num_bits} bits holds only {len(bits)} bytes")
        return cls(bits, num_bits, probes & (WORD_HASH - 1), words=bool(probes & WORD_HASH))
