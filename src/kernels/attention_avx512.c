/* AVX-512 attention (placeholder: the scalar reference until the SIMD kernel lands). */
#include "kernels/kernels_impl.h"
void kvs_attention_unit_ref(const kvs_attn_call *c, int t0, int t1, int g, float *work);
void kvs_attention_unit_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work);
void kvs_attention_unit_avx512(const kvs_attn_call *c, int t0, int t1, int g, float *work) {
    kvs_attention_unit_ref(c, t0, t1, g, work);
}
