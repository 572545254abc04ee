"""No leak: RSS stays flat over 1,000 one-token generate calls (200 in
quick mode), each allocating and freeing a result with n_vocab logits, on
the tiny model (the binding's paths are the same for every model)."""
import os

import kvstitch
from conftest import QUICK


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_rss_flat_over_generate_calls(tiny_model):
    cache = kvstitch.Cache(tiny_model, budget_bytes=16 << 20)
    s = kvstitch.Session(tiny_model, cache, n_ctx=128, threads=1)
    prompt = "The quick brown fox jumps over the lazy dog."
    for _ in range(50):  # warm-up: allocator pools, the prompt's chunks, the stream buffers
        s.generate(prompt, max_tokens=1, logprobs=2)
    before = rss_bytes()
    n = 200 if QUICK else 1000
    for _ in range(n):
        r = s.generate(prompt, max_tokens=1, logprobs=2, logits=True)
        assert len(r.tokens) == 1
    grown = rss_bytes() - before
    print(f"RSS growth over {n} calls: {grown / 1024:.0f} KiB")
    # a leaked result would be >= 128 KB per call (its 32000 logits alone)
    assert grown < 4 << 20, f"RSS grew {grown} bytes over {n} calls"
