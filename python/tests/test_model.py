"""Model.load, info, tokenize / detokenize, chat rendering, package surface."""
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import kvstitch


def test_version_matches_header():
    hdr = (Path(__file__).resolve().parents[2] / "include" / "kvstitch.h").read_text()
    want = ".".join(re.search(r"#define KVS_VERSION_%s (\d+)" % p, hdr).group(1)
                    for p in ("MAJOR", "MINOR", "PATCH"))
    assert kvstitch.__version__ == want


def test_isa_paths_and_in_use(model_path):
    paths = kvstitch.isa_paths()
    assert paths[-1] == "scalar" and kvstitch.isa_in_use() in paths
    # KVS_ISA caps a whole process (fresh interpreters: it is read once), every
    # path generating the same tokens
    code = ("import kvstitch, sys; m = kvstitch.Model.load(sys.argv[1]); "
            "r = kvstitch.Session(m).generate('The capital of France is', max_tokens=6, chat=False); "
            "print(kvstitch.isa_in_use(), r.tokens)")
    base = subprocess.run([sys.executable, "-c", code, model_path], capture_output=True, text=True, check=True)
    for p in paths[1:]:
        env = dict(os.environ, KVS_ISA=p)
        got = subprocess.run([sys.executable, "-c", code, model_path], capture_output=True, text=True, env=env,
                             check=True).stdout.split(" ", 1)
        assert got[0] == p and got[1] == base.stdout.split(" ", 1)[1], (p, got)
    env = dict(os.environ, KVS_ISA="avx3")
    bad = subprocess.run([sys.executable, "-c", code, model_path], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and "InvalidArgument" in bad.stderr and "KVS_ISA=avx3: unknown" in bad.stderr, \
        bad.stderr[-500:]


def test_info(model, model_path):
    info = model.info
    assert info.path == model_path
    assert info.arch == "llama" and info.n_layer == 30 and info.n_vocab == 49152
    assert info.chat_template_family == "chatml"
    assert info.raw["n_embd"] == info.n_embd == 576
    assert model.n_vocab == info.n_vocab


def test_tokenize_detokenize_roundtrip(model):
    text = "Hello, world! Grüße, 東京 🙂 and tabs\tand\nnewlines"
    ids = model.tokenize(text)
    assert ids and all(isinstance(t, int) for t in ids)
    assert model.detokenize(ids) == text


def test_tokenize_special(model):
    plain = model.tokenize("<|im_start|>user", special=False)
    special = model.tokenize("<|im_start|>user", special=True)
    assert len(special) < len(plain)
    assert model.detokenize(special, render_special=True) == "<|im_start|>user"


def test_render_chat(model):
    text = model.render_chat([{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": "Hi"}])
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")


def test_chat_template_chosen_at_load(model_path):
    """Model.load(chat_template=...): the family every chat layout of the
    model uses (render_chat, Session's chat segments), for a file without a
    template; an explicit family still wins; an unknown one is refused."""
    m = kvstitch.Model.load(model_path, vocab_only=True, chat_template="gemma")
    try:
        assert m.info.chat_template_family == "gemma"
        assert m.render_chat([{"role": "user", "content": "Hi"}]) == \
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        assert m.render_chat([{"role": "user", "content": "Hi"}], family="llama3").startswith("<|start_header_id|>")
    finally:
        m.close()
    for bad in ("jinja", "gemma\0x", 3):
        try:
            kvstitch.Model.load(model_path, vocab_only=True, chat_template=bad)
        except kvstitch.InvalidArgument as e:
            assert "chat_template" in str(e) or "'jinja'" in str(e), e
        else:
            raise AssertionError(f"chat_template={bad!r} was taken")


def test_public_surface_documented():
    pkg = Path(kvstitch.__file__).parent
    assert (pkg / "py.typed").exists()
    for name in kvstitch.__all__:
        obj = getattr(kvstitch, name)
        if inspect.isclass(obj):
            assert obj.__doc__, name
            for meth_name, meth in inspect.getmembers(obj, inspect.isfunction):
                if not meth_name.startswith("_"):
                    assert meth.__doc__, f"{name}.{meth_name}"
