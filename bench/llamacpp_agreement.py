"""Teacher-forced agreement of kvstitch with llama.cpp (issue #14): the same
token ids fed to both engines, and at every position the top-1 of each
engine's next-token logits compared; also with the float64 reference's top-1
where a golden file gives it (tests/data/golden/<model>_tf.txt).

Two halves, because the engines live in different venvs:
  python bench/llamacpp_agreement.py ours  MODEL IDS_FILE OUT.json   (kvstitch's Python package)
  python bench/llamacpp_agreement.py peer  MODEL IDS_FILE OUT.json   (llama-cpp-python)
  python bench/llamacpp_agreement.py compare OURS.json PEER.json [GOLDEN_TF]
IDS_FILE: whitespace-separated token ids (bench/llamacpp-agreement.sh makes
them with kvstitch's tokenizer from held texts). Position t's top-1 is the
argmax of the logits after ids[0..t].
"""
import json
import sys


def top1_ours(model_path, ids):
    import numpy as np
    import kvstitch
    model = kvstitch.Model.load(model_path)
    cache = kvstitch.Cache(model)
    s = kvstitch.Session(model, cache)
    out = []
    # every prefix: exact prefix reuse makes each call compute one new token,
    # bit-identical to a cold run of the prefix
    for t in range(1, len(ids) + 1):
        r = s.generate(ids[:t], max_tokens=1, logits=True, add_bos=False)
        out.append(int(np.argmax(np.frombuffer(r.first_logits, dtype=np.float32))))
    return out


def top1_peer(model_path, ids):
    import numpy as np
    from llama_cpp import Llama
    llm = Llama(model_path=model_path, n_ctx=max(512, len(ids) + 8), logits_all=True, verbose=False,
                n_threads=2)
    llm.eval(ids)
    scores = np.asarray(llm.scores[: len(ids)])
    return [int(i) for i in scores.argmax(axis=1)]


def golden_top1(path):
    """ids and the reference top-1 per position of a *_tf.txt golden file."""
    with open(path) as f:
        lines = [l for l in f if not l.startswith("#")]
    ids = [int(v) for v in lines[0].split()]
    ref = [int(l.split()[0]) for l in lines[1:] if l.strip()]
    return ids, ref


def main():
    mode = sys.argv[1]
    if mode in ("ours", "peer"):
        model, ids_file, out = sys.argv[2:5]
        with open(ids_file) as f:
            ids = [int(v) for v in f.read().split()]
        top = top1_ours(model, ids) if mode == "ours" else top1_peer(model, ids)
        with open(out, "w") as f:
            json.dump({"ids": ids, "top1": top}, f)
        return
    ours, peer = (json.load(open(p)) for p in sys.argv[2:4])
    assert ours["ids"] == peer["ids"], "the two halves ran on different ids"
    n = len(ours["top1"])
    agree = sum(a == b for a, b in zip(ours["top1"], peer["top1"]))
    print(f"positions {n}: kvstitch vs llama.cpp top-1 agreement {agree}/{n} = {100.0 * agree / n:.2f}%")
    if len(sys.argv) > 4:
        gids, ref = golden_top1(sys.argv[4])
        m = min(len(ref), n)
        if gids[:m] == ours["ids"][:m]:
            a_ours = sum(ours["top1"][t] == ref[t] for t in range(m))
            a_peer = sum(peer["top1"][t] == ref[t] for t in range(m))
            print(f"vs the float64 reference ({m} positions): kvstitch {a_ours}/{m} = {100.0 * a_ours / m:.2f}%, "
                  f"llama.cpp {a_peer}/{m} = {100.0 * a_peer / m:.2f}%")


if __name__ == "__main__":
    main()
