#!/usr/bin/env python3
"""One JSON line per benchmark run, for the side-by-side scripts
(bench/roofline.sh, bench/long-context.sh, bench/peers.sh).

  bench_json.py kvstitch WHO [key=value ...] < `kvstitch bench --json` output
  bench_json.py llama    WHO [key=value ...] < `llama-bench -o json` output

Prints {"who": WHO, key: value..., "pp": tok/s, "tg": tok/s} (pp / tg null
where the run had none); from kvstitch also "depth", "bytes" (weight bytes)
and "cpu". Values that look like integers become integers.
"""
import json
import sys


def main():
    kind, who = sys.argv[1], sys.argv[2]
    out = {"who": who}
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    d = json.load(sys.stdin)
    if kind == "kvstitch":
        out.update(pp=(d.get("pp") or {}).get("tok_s"), tg=(d.get("tg") or {}).get("tok_s"),
                   depth=d.get("depth"), bytes=d.get("weight_bytes"), cpu=d.get("cpu"))
    elif kind == "llama":
        v = {("pp" if x["n_prompt"] else "tg"): x["avg_ts"] for x in d}
        out.update(pp=v.get("pp"), tg=v.get("tg"))
    else:
        sys.exit("bench_json: kind is kvstitch or llama, got %r" % kind)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
