"""Turns include/kvstitch.h into the declarations cffi reads.

The C header is the only description of the ABI: struct layouts, enums and
prototypes are parsed from it (cffi ABI mode), never written out again in
Python, so a field added or moved in C cannot silently misalign here.
cffi's parser takes plain C declarations, so this drops what it does not
read: comments, the include guard's contents of nested #if blocks (the
KVS_API attribute and the C++ guards), #include lines and the KVS_API
marker; integer #defines are substituted into array sizes and returned.
"""
from __future__ import annotations

import re

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE_INT = re.compile(r"#\s*define\s+(\w+)\s+(-?\d+)\s*$")


def cdef_from_header(text: str) -> tuple[str, dict[str, int]]:
    """Returns (declarations for ffi.cdef, integer macros of the header)."""
    text = _COMMENT.sub(" ", text)
    consts: dict[str, int] = {}
    out: list[str] = []
    depth = 0  # 1 inside the include guard; deeper blocks are dropped
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            d = s[1:].lstrip()
            if d.startswith("if"):
                depth += 1
            elif d.startswith("endif"):
                depth -= 1
            elif depth == 1:
                m = _DEFINE_INT.match(s)
                if m:
                    consts[m.group(1)] = int(m.group(2))
            continue
        if depth > 1:
            continue
        out.append(line)
    body = "\n".join(out).replace("KVS_API", "")
    for name, value in consts.items():
        body = re.sub(r"\b%s\b" % re.escape(name), str(value), body)
    return body, consts
