#!/usr/bin/env python3
"""shard_vectors.py - writes tests/fixtures/shard_vectors.txt, the shard hash
vectors every implementation (C test_shards, later Lua and retryctl) checks
itself against. An implementation of its own, from docs/sharding.md section
2's pseudo-code, in Python's exact integers.

Each line: the name's bytes in hex ("-" for none), fnv, then jump for
N = 1..64. Run: python3 tests/shard_vectors.py > tests/fixtures/shard_vectors.txt
"""
import random

M32 = 2 ** 32


def fnv(data: bytes) -> int:
    h = 2166136261
    for c in data:
        h = ((h ^ c) * 16777619) % M32
    return h


def jump(x: int, n: int) -> int:
    b, j = -1, 0
    while j < n:
        b = j
        x = ((x ^ 0xA5) * 16777619) % M32
        j = (b + 1) * M32 // (x + 1)
    return b


def names():
    yield b"tenant-42"
    yield b"order:1001"
    yield b""
    yield b"a"
    yield "é-日本".encode()
    yield b"\x00\xff"
    yield b"k" * 255
    rng = random.Random(25)
    for _ in range(60):
        n = rng.randint(1, 40)
        yield bytes(rng.randint(0, 255) for _ in range(n))


def main():
    print("# name-hex fnv jump(N=1..64); written by tests/shard_vectors.py")
    for name in names():
        h = fnv(name)
        cols = [name.hex() or "-", str(h)] + [str(jump(h, n)) for n in range(1, 65)]
        print(" ".join(cols))


if __name__ == "__main__":
    main()
