"""
Writers of GGUF K-quant blocks (Q4_K, Q5_K, Q6_K) in numpy: the PyPI `gguf`
package dequantizes every type but quantizes only the 32-element ones, and
the random-weight test models (gen_random_model.py) want a Q4_K_M-like mix.

Each function takes float rows (n, k), k a multiple of 256, and returns the
raw blocks as uint8 (n, k / 256 * block_bytes), laid out exactly as
gguf.quants' dequantize_blocks reads them (the inverse of its unpacking).
The scale choice is simple (min/max per sub-block, not llama.cpp's search):
these blocks only need to be valid and close to the input; the references
dequantize them with the gguf package, so the quantization error is part of
the model, not of the comparison. check() asserts the round trip.
"""
import numpy as np
import gguf
from gguf.quants import dequantize

QK_K = 256


def _f16(x):
    return np.asarray(x, dtype=np.float16)


def _pack_scale_min(sc, mn):
    """8 six-bit scales and mins -> the 12 bytes of Q4_K / Q5_K (see
    gguf.quants.Q4_K.get_scale_min): bytes j < 4 hold sc[j] and the top two
    bits of sc[4 + j]; bytes 4 + j hold mn[j] and the top bits of mn[4 + j];
    bytes 8 + j the low nibbles of sc[4 + j] and mn[4 + j]."""
    sc, mn = sc.astype(np.uint8), mn.astype(np.uint8)
    out = np.zeros(sc.shape[:-1] + (12,), dtype=np.uint8)
    out[..., 0:4] = sc[..., 0:4] | ((sc[..., 4:8] >> 4) << 6)
    out[..., 4:8] = mn[..., 0:4] | ((mn[..., 4:8] >> 4) << 6)
    out[..., 8:12] = (sc[..., 4:8] & 0x0F) | ((mn[..., 4:8] & 0x0F) << 4)
    return out


def _affine(blocks, levels):
    """Per 32-element sub-block: x ~ d * sc * q - dmin * m, q in 0..levels."""
    nb = blocks.shape[0]
    sub = blocks.reshape(nb, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    hi = np.maximum(sub.max(axis=2), 0.0)
    scale, mins = (hi - lo) / levels, -lo
    d = _f16(scale.max(axis=1) / 63.0)
    dmin = _f16(mins.max(axis=1) / 63.0)
    df, dminf = d.astype(np.float64), dmin.astype(np.float64)
    sc = np.clip(np.round(np.divide(scale, df[:, None], out=np.zeros_like(scale), where=df[:, None] > 0)), 0, 63)
    mn = np.clip(np.round(np.divide(mins, dminf[:, None], out=np.zeros_like(mins), where=dminf[:, None] > 0)), 0, 63)
    step = df[:, None] * sc
    q = np.divide(sub + (dminf[:, None] * mn)[:, :, None], step[:, :, None],
                  out=np.zeros_like(sub), where=step[:, :, None] > 0)
    q = np.clip(np.round(q), 0, levels).astype(np.uint8)
    return d, dmin, sc, mn, q


def q4_k(rows):
    nb = rows.size // QK_K
    d, dmin, sc, mn, q = _affine(rows.reshape(nb, QK_K).astype(np.float64), 15)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)  # byte group g: sub-blocks 2g, 2g+1
    blk = np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8),
                          _pack_scale_min(sc, mn), qs], axis=1)
    return blk.reshape(rows.shape[0], -1)


def q5_k(rows):
    nb = rows.size // QK_K
    d, dmin, sc, mn, q = _affine(rows.reshape(nb, QK_K).astype(np.float64), 31)
    lo = q & 0x0F
    qs = (lo[:, 0::2, :] | (lo[:, 1::2, :] << 4)).reshape(nb, 128)
    qh = np.zeros((nb, 32), dtype=np.uint8)  # bit i of qh[l]: high bit of sub-block i, element l
    for i in range(8):
        qh |= ((q[:, i, :] >> 4) & 1) << i
    blk = np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8),
                          _pack_scale_min(sc, mn), qh, qs], axis=1)
    return blk.reshape(rows.shape[0], -1)


def q6_k(rows):
    nb = rows.size // QK_K
    x = rows.reshape(nb, QK_K).astype(np.float64)
    sub = x.reshape(nb, 16, 16)
    scale = np.abs(sub).max(axis=2) / 31.0
    d = _f16(scale.max(axis=1) / 127.0)
    df = d.astype(np.float64)
    sc = np.clip(np.round(np.divide(scale, df[:, None], out=np.zeros_like(scale), where=df[:, None] > 0)), -128, 127)
    step = df[:, None] * sc
    q = np.divide(sub, step[:, :, None], out=np.zeros_like(sub), where=step[:, :, None] > 0)
    q = (np.clip(np.round(q), -32, 31) + 32).astype(np.uint8).reshape(nb, QK_K)
    # element e = 128 h + 32 k + l: ql[64 h + 32 (k % 2) + l] nibble k // 2, qh[32 h + l] bits 2k..2k+1
    qr = q.reshape(nb, 2, 4, 32)
    lo = qr & 0x0F
    ql = np.concatenate([lo[:, :, 0, :] | (lo[:, :, 2, :] << 4), lo[:, :, 1, :] | (lo[:, :, 3, :] << 4)], axis=2)
    ql = ql.reshape(nb, 128)
    hi = qr >> 4
    qh = (hi[:, :, 0, :] | (hi[:, :, 1, :] << 2) | (hi[:, :, 2, :] << 4) | (hi[:, :, 3, :] << 6)).reshape(nb, 64)
    blk = np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), d.reshape(nb, 1).view(np.uint8)], axis=1)
    return blk.reshape(rows.shape[0], -1)


WRITERS = {
    gguf.GGMLQuantizationType.Q4_K: q4_k,
    gguf.GGMLQuantizationType.Q5_K: q5_k,
    gguf.GGMLQuantizationType.Q6_K: q6_k,
}


def quantize(rows, qtype):
    """Raw blocks of rows (n, k) in qtype: K-quants here, the rest by gguf."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if qtype in WRITERS:
        return WRITERS[qtype](rows)
    return gguf.quants.quantize(rows, qtype)


def check(rows, qtype, raw):
    """The gguf package reads the blocks back within the type's step: a
    misplaced bit would give errors of the order of the values themselves."""
    back = dequantize(raw, qtype).reshape(rows.shape)
    rel = np.sqrt(np.mean((back - rows) ** 2) / np.mean(rows ** 2))
    bound = {gguf.GGMLQuantizationType.Q4_K: 0.15, gguf.GGMLQuantizationType.Q5_K: 0.08,
             gguf.GGMLQuantizationType.Q6_K: 0.04, gguf.GGMLQuantizationType.Q8_0: 0.01}.get(qtype, 1e-3)
    assert rel < bound, f"{qtype.name}: relative rms error {rel:.4f} of the round trip (bound {bound})"
    return rel
