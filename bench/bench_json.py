#!/usr/bin/env python3
"""One JSON line per benchmark run, for the side-by-side scripts
(bench/roofline.sh, bench/long-context.sh, bench/peers.sh).

  bench_json.py kvstitch WHO [key=value ...] < `kvstitch bench --json` output
  bench_json.py llama    WHO [key=value ...] < `llama-bench -o json` output
  bench_json.py llama-batched WHO streams=N [key=value ...]
                < `llama-batched-bench -npl 1,N --output-format jsonl` output

Prints {"who": WHO, key: value..., "pp": tok/s, "tg": tok/s} (pp / tg null
where the run had none); from kvstitch also "depth", "bytes" (weight bytes)
and "cpu"; from llama-batched tg = the aggregate decode of its N parallel
sequences and "tg1" that of one. Values that look like integers become
integers.
"""
import json
import sys


def main():
    kind, who = sys.argv[1], sys.argv[2]
    out = {"who": who}
    for kv in sys.argv[3:]:
        k, v = kv.split("=", 1)
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    if kind == "llama-batched":  # one JSON object a line, one line per -npl value
        speed = {}
        for line in sys.stdin:
            if line.strip().startswith("{"):
                row = json.loads(line)
                speed[row["pl"]] = row["speed_tg"]
        if "streams" not in out or out["streams"] not in speed:
            sys.exit("bench_json: llama-batched needs streams=N and a row with pl == N")
        out.update(pp=None, tg=speed[out["streams"]], tg1=speed.get(1))
        print(json.dumps(out))
        return
    text = sys.stdin.read()
    if not text.strip():  # the run failed and said why on stderr: no traceback over its message
        sys.exit("bench_json: %s printed no JSON (its run failed: see its message above)" % who)
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        sys.exit("bench_json: %s printed no valid JSON (%s): %r" % (who, e, text[:200]))
    if kind == "kvstitch":
        out.update(pp=(d.get("pp") or {}).get("tok_s"), tg=(d.get("tg") or {}).get("tok_s"),
                   depth=d.get("depth"), bytes=d.get("weight_bytes"), cpu=d.get("cpu"))
    elif kind == "llama":
        v = {("pp" if x["n_prompt"] else "tg"): x["avg_ts"] for x in d}
        out.update(pp=v.get("pp"), tg=v.get("tg"))
    else:
        sys.exit("bench_json: kind is kvstitch, llama or llama-batched, got %r" % kind)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
