/* Placeholder: the avx2 path (replaced by the SIMD kernels). */
#include "kernels/kernels_impl.h"
#if defined(__x86_64__)
void kvs_attention_unit_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work);
static void q_rows(const kvs_mm_call *c, int i0, int i1) { kvs_isa_scalar.quantize_rows(c, i0, i1); }
static void mm_cols(const kvs_mm_call *c, int j0, int j1) { kvs_isa_scalar.matmul_cols(c, j0, j1); }
const kvs_isa kvs_isa_avx2 = {.name = "avx2", .quantize_rows = q_rows, .matmul_cols = mm_cols,
                             .attention_unit = kvs_attention_unit_ref};
#endif
