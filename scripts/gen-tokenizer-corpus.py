#!/usr/bin/env python3
"""Generates the SmolLM2 tokenizer corpus and its expected ids with the
reference implementation (the PyPI `tokenizers` library and
../shared/reference/smollm2-tokenizer.json), plus pre-tokenizer splits of
the Llama-3 / Qwen2 / GPT-2 regexes (tokenizers' own regex engine).

Run with the venv python (scripts/setup-venv.sh prints it), from anywhere:
    $(scripts/setup-venv.sh | tail -n 1) scripts/gen-tokenizer-corpus.py

Writes tests/data/tokenizer/ (committed; deterministic output):
  smollm2-corpus.inp            strings separated by "\\n__ggml_vocab_test__\\n"
                                (the layout of llama.cpp's vectors; ends with one)
  smollm2-corpus.out            one line of ids per string: encode(s,
                                add_special_tokens=False), special tokens in the
                                text recognised (HF default = KVS_TOKENIZE_PARSE_SPECIAL)
  smollm2-corpus.nospecial.out  the same with encode_special_tokens=True (special
                                tokens are plain text = flags 0); "=" when equal
                                to the line of smollm2-corpus.out
  pretok-{gpt2,llama3,qwen2}.out  for each of the first N_PRETOK strings, the
                                length in code points of every piece
"""
import json
import os
import random
import sys

from tokenizers import Regex, Tokenizer, pre_tokenizers

SEP = "\n__ggml_vocab_test__\n"
N_PRETOK = 400

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.environ.get("KVSTITCH_SHARED", os.path.join(ROOT, "..", "shared"))
OUT_DIR = os.path.join(ROOT, "tests", "data", "tokenizer")

REGEX = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}

HAND = [
    # whitespace runs, tabs, newlines
    "", " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \t\n ",
    "a  b", "a   b", "a\tb", "a\t\tb", "a\n\nb", "a \n b", "a\t b", "a \tb", "  leading", "trailing  ",
    "\tindented\n\tlines\n", "line1\nline2\r\nline3\rline4", "x \u00a0y", "x\u3000y", "x\u2003\u2003y",
    "x\u0085y", "x\u001cy\u001dz\u001e\u001f", "x\u200by", "x\u2028y\u2029z", "x\u202f\u205fy", "\u00a0\u00a0a",
    "    four spaces", "        eight", "\n\n\n\n\n\nmany newlines", "end with newline\n", "ends\t",
    # digits and numbers
    "3", "33", "333", "3333", "12345678901234567890", "3.14159", "1,000,000", "-42", "+7", "0x1F", "1e-9",
    "2024-05-09", "10:30pm", "v1.2.3", "abc123def", "123abc", " 123", "a 1 b 2", "٠١٢٣٤٥٦٧٨٩", "１２３",
    "²³¹", "½ ¼ ¾", "Ⅻ ⅻ", "𝟘𝟙𝟚", "४२", "৩", "十二", "第3回", "$100", "€5,50", "50%", "#1", "1st 2nd 3rd 4th",
    # contractions
    "it's", "don't", "you're", "we've", "I'm", "we'll", "he'd", "IT'S", "DON'T", "You'Re", "'s", "'t", "'re",
    "'", "''", "'''", "rock 'n' roll", "o'clock", "y'all", "it’s curly", "don’t", "'ll've'd", " 's", "a's b't",
    "the cat's hat's", "'S 'T 'RE 'VE 'M 'LL 'D",
    # punctuation and symbols
    "Hello, world!", "Hello World", " Hello World", "hello...", "?!?!", "!!!!!!", "(a)", "[b]", "{c}", "<d>",
    "a--b", "a---b", "—em dash—", "–", "…", "«quote»", "„Anführung“", "『括弧』", "@user #tag", "a/b\\c",
    "~`^|", "§¶†‡", "©®™", "±×÷", "∑∫√∞≠≤≥", "→←↑↓", "♠♥♦♣", "★☆", "°C", "µs", "ﬁ ﬂ", "Å Å",
    # scripts
    "Führer", "naïve café", "Ærøskøbing", "Łódź", "İstanbul ışık", "Cửa Việt", "Tiếng Việt có dấu",
    "нещо на Български", "Привет, мир!", "Ελληνικά γράμματα", "שלום עולם", "مرحبا بالعالم", "فارسی",
    "हिन्दी भाषा", "বাংলা", "தமிழ்", "తెలుగు", "ಕನ್ನಡ", "മലയാളം", "ગુજરાતી", "ਪੰਜਾਬੀ", "ไทยภาษา",
    "ລາວ", "កាន់តែពិសេសអាចខលចេញ", "မြန်မာ", "ქართული", "Հայերեն", "አማርኛ", "ᏣᎳᎩ", "ᐃᓄᒃᑎᑐᑦ",
    "中文字符测试", "我想在apple工作1314151天～", "日本語のテキスト", "カタカナ ひらがな", "한국어 텍스트",
    "ᠮᠣᠩᠭᠣᠯ", "བོད་ཡིག", "ދިވެހި", "ꦗꦮ", "𐌰𐌱𐌲 gothic", "𓀀𓀁 hieroglyphs", "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭",
    "e\u0301 combining", "a\u0308\u0304", "Z\u0351\u0362a\u0336l\u0334g\u0337o", "\u0915\u094d\u0937",
    "mixed Русский and English и 中文", "ǅ ǈ ǋ titlecase", "ʰʲʷ modifiers", "ªº",
    # emoji
    "🦙", " this is 🦙.cpp", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🏴‍☠️", "🇫🇷🇯🇵",
    "1️⃣ #️⃣", "❤️", "☕ tea", "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ (only emoji that has its own token)",
    "emoji🙂in🙂text", "🧑‍🤝‍🧑", "🫠🫡", "⚡️🔥💯",
    # code
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }",
    '{"key": "value", "n": [1, 2, 3], "ok": true}', "<div class=\"x\">Hello &amp; bye</div>",
    "SELECT * FROM users WHERE id = 42;", "x = a->b && c || !d; y <<= 2; z != w",
    "    if x:\n        pass\n    else:\n        raise ValueError('bad')",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }", "$ ls -la | grep '^d' > out.txt 2>&1",
    "https://example.com/path?q=1&r=two#frag", "user@example.org", "C:\\Users\\name\\file.txt",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE", "a_b__c___d", "x+=1;y-=2;",
    "/* comment */ // line comment", "<?php echo $x; ?>", "\\begin{equation} E = mc^2 \\end{equation}",
    # special-token-like text
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "text<|endoftext|>more",
    "<|im_start", "im_start|>", "< |im_end|>", "<|im_end |>", "<<|im_end|>>", "<|im_end|><|im_end|>",
    "<repo_name>kvstitch<file_sep>a.c", "<filename>x.py\n<gh_stars>10", "<jupyter_code>print(1)<jupyter_output>1",
    "<issue_start>bug<issue_comment>fix<issue_closed>", "<empty_output>", "<s>", "</s>", "<unk>",
    "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>", "[INST] hi [/INST]", "<<SYS>>\nsys\n<</SYS>>",
    " <|im_start|> spaced <|im_end|> ", "\n<|im_start|>\n",
    # misc
    "ied 4 ½ months", "w048 7tuijk dsdfhu", "Hello, y'all! How are you 😁 ?", " discards",
    "' era", "\n =", "  Hello\n  Hello", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    "a" * 300, "ab" * 150, " " * 100, "\n" * 50, "!" * 200, "🦙" * 40, "x y " * 60,
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Donaudampfschifffahrtsgesellschaftskapitän", "pneumonoultramicroscopicsilicovolcanoconiosis",
]

POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " " * 8 + "\t\n\r",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "'sStTrReEvVmMlLdD",
    "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿĀāĂăĄąĆćŁłŒœŠšŸŽž",
    "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГД",
    "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔ",
    "אבגדהוזחטיכלמנסעפצקרשת",
    "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "अआइईउऊएऐओऔकखगघचछजझटठडढणतथदधनपफबभमयरलवशसह्ािीुूेैोौं",
    "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮะาำิีึืุู่้๊๋",
    "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
    "あいうえおかきくけこさしすせそアイウエオカキクケコ",
    "가나다라마바사아자차카타파하한국어",
    "٠١٢٣٤٥٦٧٨٩０１２３４５６７８９²³½¼Ⅻ",
    "\u00a0\u3000\u2003\u2009\u0085\u200b\u2028",
    "😀😁😂🤣😃😄😅🦙🚀✅❤👍🏽🇫🇷",
    "\u200d\ufe0f\u0301\u0308\u20e3",
    "—–…«»“”‘’•·°±×÷∞≠≤≥→←",
    "𝕳𝖊𝖑𝖔𝟘𝟙𝟚𐌰𐌱𓀀",
]


def random_strings(rng, n):
    out = []
    for _ in range(n):
        k = rng.randint(1, 4)
        pools = rng.sample(POOLS, k)
        length = rng.randint(1, 80)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(length))
        out.append(s)
    return out


def word_salad(rng, n):
    """Natural-ish text: words, digits and punctuation with varied spacing."""
    words = ["the", "The", "of", "and", "a", "to", "in", "is", "was", "it's", "don't", "they're",
             "I've", "we'll", "she'd", "I'm", "1990", "2,500", "3.5", "km²", "U.S.", "e.g.", "(see",
             "above)", "—", "Zürich", "São", "Paulo", "Москва", "東京", "🙂", "x=1;", "f(x)",
             "\"quoted\"", "'single'", "#hashtag", "@mention", "http://a.b/c"]
    seps = [" ", " ", " ", "  ", "\t", "\n", "\n\n", " \n", ", ", ". ", "; "]
    out = []
    for _ in range(n):
        m = rng.randint(3, 40)
        out.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(m)).rstrip(" ") if rng.random() < 0.5
                   else "".join(rng.choice(words) + rng.choice(seps) for _ in range(m)))
    return out


def rag_passages():
    out = []
    with open(os.path.join(SHARED, "data", "musique_dev.json")) as f:
        musique = json.load(f)
    for i, item in enumerate(musique):
        for j, ctx in enumerate(item["ctxs"]):
            # Every 4th passage keeps the committed data small; the bench
            # tokenizes all of them.
            if (i * 10 + j) % 4 == 0:
                out.append(ctx["text"])
        if i % 10 == 0:
            out.append(item["question"])
    wdir = os.path.join(SHARED, "data", "wikimqa_dev")
    for name in sorted(os.listdir(wdir)):
        with open(os.path.join(wdir, name)) as f:
            w = json.load(f)
        for k in sorted(w):
            if k != "chunk_num" and isinstance(w[k], str):
                out.append(w[k])
    return out


def main():
    rng = random.Random(20240509)
    strings = list(HAND) + random_strings(rng, 220) + word_salad(rng, 60) + rag_passages()
    for s in strings:
        assert SEP not in s and "\0" not in s
    tok = Tokenizer.from_file(os.path.join(SHARED, "reference", "smollm2-tokenizer.json"))
    ids = [tok.encode(s, add_special_tokens=False).ids for s in strings]
    tok.encode_special_tokens = True
    ids_ns = [tok.encode(s, add_special_tokens=False).ids for s in strings]

    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, "smollm2-corpus.inp"), "w", encoding="utf-8", newline="") as f:
        f.write("".join(s + SEP for s in strings))
    with open(os.path.join(OUT_DIR, "smollm2-corpus.out"), "w", newline="") as f:
        f.write("".join(" ".join(map(str, x)) + "\n" for x in ids))
    with open(os.path.join(OUT_DIR, "smollm2-corpus.nospecial.out"), "w", newline="") as f:
        f.write("".join(("=" if a == b else " ".join(map(str, b))) + "\n" for a, b in zip(ids, ids_ns)))

    for name, rx in REGEX.items():
        pt = pre_tokenizers.Split(Regex(rx), behavior="isolated")
        with open(os.path.join(OUT_DIR, "pretok-%s.out" % name), "w", newline="") as f:
            for s in strings[:N_PRETOK]:
                pieces = pt.pre_tokenize_str(s)
                assert "".join(p for p, _ in pieces) == s
                f.write(" ".join(str(len(p)) for p, _ in pieces) + "\n")

    n_tok = sum(len(x) for x in ids)
    n_diff = sum(a != b for a, b in zip(ids, ids_ns))
    size = sum(os.path.getsize(os.path.join(OUT_DIR, n)) for n in os.listdir(OUT_DIR))
    print("%d strings, %d tokens, %d differ without special parsing, %d bytes in %s"
          % (len(strings), n_tok, n_diff, size, OUT_DIR), file=sys.stderr)


if __name__ == "__main__":
    main()
