"""The Python binding's overhead on a 1-token generate, measured side by side.

In one process, calls alternate between
  py:  kvstitch.Session.generate(PROMPT, max_tokens=1)   (the binding's path)
  raw: kvs_tokenize + kvs_generate_cached + kvs_generate_result_free called
       directly through cffi (the C library path, same inputs, no binding code)
on the same context and cache, so load drift hits both alike; overhead =
median(py) - median(raw), and the median of the paired differences. Then
bench/generate_one (the same loop in C) gives the C program's own figure.
Run from the repository root with the venv python (scripts/setup-venv.sh):
  PYTHONPATH=python KVSTITCH_LIB=build/libkvstitch.so $PY bench/python_overhead.py [calls] [threads]
"""
import os
import statistics
import subprocess
import sys
import time

import kvstitch
from kvstitch._lib import ffi, lib

PROMPT = "The quick brown fox jumps over the lazy dog."  # as bench/generate_one.c


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    path = os.environ["KVSTITCH_MODEL"]
    model = kvstitch.Model.load(path, threads=threads)
    cache = kvstitch.Cache(model, budget_bytes=64 << 20)
    s = kvstitch.Session(model, cache, n_ctx=256)

    text = PROMPT.encode()
    ids, n = ffi.new("int32_t[64]"), ffi.new("int *")
    gp = lib.kvs_generate_default_params()
    gp.n_predict = 1
    gpp = ffi.new("kvs_generate_params *", gp)
    r = ffi.new("kvs_generate_result *")

    def raw() -> None:
        assert lib.kvs_tokenize(model._h, text, len(text), lib.KVS_TOKENIZE_ADD_BOS, ids, 64, n) == 0
        assert lib.kvs_generate_cached(s._h, cache._h, ids, n[0], gpp, ffi.NULL, r) == 0
        lib.kvs_generate_result_free(r)

    def py() -> None:
        s.generate(PROMPT, max_tokens=1)

    for _ in range(20):
        raw(); py()
    t_raw, t_py, c_raw, c_py = [], [], [], []
    for i in range(calls):
        order = ((raw, t_raw, c_raw), (py, t_py, c_py))
        for f, acc, cpu in order if i % 2 == 0 else order[::-1]:
            t0, c0 = time.perf_counter(), time.thread_time()
            f()
            acc.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.thread_time() - c0) * 1e3)
    diffs = [a - b for a, b in zip(t_py, t_raw)]
    med = statistics.median
    print(f"python_overhead: {calls} pairs, {threads} thread(s), {sys.version.split()[0]}, "
          f"cffi {__import__('cffi').__version__}; load {os.getloadavg()[0]:.1f}")
    print(f"  raw C path via cffi : median {statistics.median(t_raw):.3f} ms")
    print(f"  Session.generate    : median {statistics.median(t_py):.3f} ms")
    print(f"  overhead (wall)     : {med(t_py) - med(t_raw):+.3f} ms "
          f"(median of paired differences {med(diffs):+.3f} ms)")
    # CPU time of the calling thread (with 1 thread the library computes on it):
    # what the binding costs in work, unaffected by waiting for a loaded CPU.
    print(f"  CPU, this thread    : raw {med(c_raw):.3f} ms, Session.generate {med(c_py):.3f} ms, "
          f"overhead {med(c_py) - med(c_raw):+.3f} ms")
    exe = os.path.join(os.environ.get("BUILD", "build"), "bench", "generate_one")
    if os.path.exists(exe):
        out = subprocess.run([exe, str(calls), str(threads)], capture_output=True, text=True)
        print("  " + (out.stdout or out.stderr).strip())


if __name__ == "__main__":
    main()
