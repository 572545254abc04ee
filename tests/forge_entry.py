"""What a forger who can write the cache dir but holds no cache key can do to
an entry file (src/kv/disk.h layout), for the CLI tests (tests/test_forge.h
is the C tests' twin): change the KV, then recompute the payload checksum
(kvs_checksum64, src/kv/checksum.c: not cryptographic) and the header digest
(an unkeyed SHA-256). The MAC, which needs the key, stays the old one.

    python3 tests/forge_entry.py forge FILE    # KV changed, checksum + digest recomputed
    python3 tests/forge_entry.py damage FILE   # KV changed only: the checksum fails
"""
import hashlib
import struct
import sys

M = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def avalanche(h):
    h ^= h >> 31
    h = h * P3 & M
    h ^= h >> 29
    h = h * P2 & M
    return h ^ (h >> 32)


def checksum64(data, seed=0):
    """kvs_checksum64: eight lanes fed one little-endian word each per 64-byte block."""
    lanes = [(seed + P1 * (i + 1)) & M for i in range(8)]
    n = len(data)
    padded = data + bytes(-n % 64)
    for off in range(0, len(padded), 64):
        for i, w in enumerate(struct.unpack_from("<8Q", padded, off)):
            lanes[i] = rotl((lanes[i] + w * P2) & M, 29) * P1 & M
    h = (n * P3 + seed) & M
    for lane in lanes:
        h = rotl(h ^ avalanche(lane), 27) * P1 & M
    return avalanche(h)


def main(mode, path):
    f = bytearray(open(path, "rb").read())
    header_bytes = struct.unpack_from("<I", f, 8)[0]
    n_tok = struct.unpack_from("<i", f, 160)[0]
    for i in range(header_bytes, len(f), 7):  # the attacker's KV
        f[i] ^= 0x21
    if mode == "forge":
        struct.pack_into("<Q", f, 184, checksum64(bytes(f[header_bytes:])))
        covered = 192 + 4 * n_tok
        f[covered:covered + 32] = hashlib.sha256(bytes(f[:covered])).digest()
    elif mode != "damage":
        sys.exit(f"forge_entry.py: unknown mode '{mode}' (forge or damage)")
    open(path, "wb").write(bytes(f))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
