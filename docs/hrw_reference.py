#!/usr/bin/env python3
"""Reference implementation of rendezvous-hrw-v1 (docs/hrw.md), written from the spec alone.

It generates hrw/vectors.json, which the extension's and the client's tests both check, so a
second, independent implementation pins the algorithm. Run: python3 docs/hrw_reference.py
"""
import json
import math
import os
import random

MASK = (1 << 64) - 1
KEY_K = (0x7265_6E64_657A_766F, 0x7573_2D6B_6579_2D31)
HOST_K = (0x7265_6E64_657A_766F, 0x7573_2D68_6F73_7431)


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & MASK


def siphash24(k0, k1, data: bytes) -> int:
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F6D
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573

    def rnd():
        nonlocal v0, v1, v2, v3
        v0 = (v0 + v1) & MASK; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32)
        v2 = (v2 + v3) & MASK; v3 = _rotl(v3, 16); v3 ^= v2
        v0 = (v0 + v3) & MASK; v3 = _rotl(v3, 21); v3 ^= v0
        v2 = (v2 + v1) & MASK; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32)

    n = len(data)
    end = n - n % 8
    for i in range(0, end, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v3 ^= m; rnd(); rnd(); v0 ^= m
    last = (n & 0xFF) << 56
    for i, b in enumerate(data[end:]):
        last |= b << (8 * i)
    v3 ^= last; rnd(); rnd(); v0 ^= last
    v2 ^= 0xFF
    for _ in range(4):
        rnd()
    return v0 ^ v1 ^ v2 ^ v3


def fmix64(h):
    h ^= h >> 33; h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33; h = (h * 0xC4CEB9FE1A85EC53) & MASK
    h ^= h >> 33
    return h


def score(key: str, host: str) -> int:
    kh = siphash24(*KEY_K, key.encode("utf-8"))
    hh = siphash24(*HOST_K, host.encode("utf-8"))
    return fmix64(kh ^ hh) >> 1


def neg_ln_unit(u: float) -> float:
    # Python floats are IEEE-754 binary64 with correctly rounded + - * /, as the spec needs.
    m, e2 = math.frexp(u)  # u = m * 2**e2, m in [0.5, 1): exact, no rounding
    m, e = m * 2.0, e2 - 1  # m in [1, 2)
    if m > math.sqrt(2.0):  # sqrt is correctly rounded: 1.4142135623730951
        m *= 0.5
        e += 1
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = 1.0 / 23.0
    for k in range(10, -1, -1):
        p = p * z + 1.0 / float(2 * k + 1)
    ln_m = 2.0 * s * p
    return -(float(e) * 0.6931471805599453 + ln_m)


def weighted_score(sc: int, ratio: float) -> float:
    u = float(2 * (sc >> 11) + 1) * (1.0 / 9007199254740992.0)
    return ratio / neg_ln_unit(u)


def ranked(key, hosts, weights=None):
    pairs = {}
    for i, h in enumerate(hosts):
        if h is None:
            continue
        pairs[h] = 1.0 if weights is None else weights[i]
    if not pairs:
        return []
    wmax = max(pairs.values())
    weighted = any(w != wmax for w in pairs.values())
    rows = []
    for h, w in pairs.items():
        sc = score(key, h)
        ws = weighted_score(sc, w / wmax) if weighted else 0.0
        rows.append((ws, sc, h))
    # score descending, then host id ascending by UTF-8 bytes
    rows.sort(key=lambda r: (-r[0], -r[1], r[2].encode("utf-8")))
    return [r[2] for r in rows]


def main():
    rng = random.Random(20261129)
    keys = ["", "a", "firing:nightly-report:2026-11-29T00:00:00Z", "tenant-7/run-42",
            "ключ", "鍵🔑", "x" * 100, "with space", "tab\tand\nnewline"]
    keys += ["key-%d" % rng.randrange(10**9) for _ in range(40)]
    host_pool = ["host-%d" % i for i in range(20)] + ["h\u00e9", "a", "", "10.0.0.1:5432",
                                                       "worker.eu-west-1.example"]
    scores = [{"key": k, "host": h, "score": str(score(k, h))}
              for k in keys[:12] for h in host_pool[:6] + host_pool[-5:]]
    winners, weighted = [], []
    for k in keys:
        hosts = rng.sample(host_pool, rng.randrange(1, 12))
        winners.append({"key": k, "hosts": hosts, "ranked": ranked(k, hosts)})
        weights = [rng.choice([0.5, 1.0, 1.0, 2.0, 3.25, 10.0, 1e-6, 123456.789]) for _ in hosts]
        weighted.append({"key": k, "hosts": hosts, "weights": weights,
                         "ranked": ranked(k, hosts, weights)})
    doc = {
        "algorithm": "rendezvous-hrw-v1",
        "generated_by": "docs/hrw_reference.py",
        "scores": scores,
        "winners": winners,
        "weighted": weighted,
    }
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hrw", "vectors.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(out))


if __name__ == "__main__":
    main()
