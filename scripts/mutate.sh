#!/usr/bin/env bash
# make mutate: the mutation suite. Each mutation is a small deliberate bug in
# one of kvstitch's core claims (the table below: one row per mutation),
# applied to a scratch copy of this work tree (in /tmp, never here), built,
# and run against the tests that guard that claim (a subset of `make test`,
# named in the row, in quick mode). A mutation is KILLED when a test fails,
# SURVIVED when every test passes: a surviving mutation is a hole in the
# suite. The unmutated scratch tree runs every named test first (baseline):
# they must pass there, or a kill would mean nothing.
#   scripts/mutate.sh [--list] [--only ID[,ID...]]
#   MUTATE_KEEP=1   keeps the scratch tree (its path is printed)
#   BUILD           the build directory copied to start warm (default build)
# Exit 0 only when every mutation was applied and killed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
BUILD="${BUILD:-build}"

# id | file | old text (exactly once in the file; \n = newline; no '|') | new text | tests (binary[:TEST,...] or x.sh[:NAME,...]; space-separated) | claim
# A row whose `old` text is not found (the code moved) is reported NOT APPLIED and fails the run: update the row.
read -r -d '' TABLE <<'ROWS'
prefix_copy_short|src/cache/prefix.c|if (!st) st = kvs_generate_from(ctx, prompt, n_prompt, hit.n_cached, params, t0, &r);|if (!st) st = kvs_generate_from(ctx, prompt, n_prompt, hit.n_cached + (hit.n_cached % 64 != 0), params, t0, &r);|test_prefix_reuse|exact reuse: the KV copied covers the whole cached prefix (off-grid end)
chunk_key_ignores_parent|src/kv/keys.c|kvs_sha256_update(&s, root->b, sizeof root->b);|kvs_sha256_update(&s, root->b, 0);|test_kv_chunk test_store test_prefix_reuse|chunk keys: a prefix key depends on its parent (and the fingerprint)
radix_first_child_missed|src/kv/radix.c|if (t == tok) { *found = 1; return mid; }|if (t == tok && mid > 0) { *found = 1; return mid; }|test_radix|radix lookup finds the longest cached prefix (every child reachable)
avx2_attention_no_max|src/kernels/attention_avx2.c|__m256 e = kvs_exp8(_mm256_sub_ps(_mm256_loadu_ps(Sb + (size_t)(j + i) * RB), mx[rb]));|__m256 e = kvs_exp8(_mm256_sub_ps(_mm256_loadu_ps(Sb + (size_t)(j + i) * RB), _mm256_mul_ps(mx[rb], _mm256_set1_ps(1.0f + 0x1p-20f))));|test_kernels test_kernels_invariance|every ISA path (AVX2 attention) gives the scalar bits
attention_scale_1pct|src/model/hparams.c|hp->attn_scale = hp->head_dim > 0 ? 1.0f / sqrtf((float)hp->head_dim) : 0.0f;|hp->attn_scale = hp->head_dim > 0 ? 1.01f / sqrtf((float)hp->head_dim) : 0.0f;|test_golden|the forward pass matches the independent reference
move_delta_off_by_one|src/rag/move.c|(int32_t)(slot - (c->pos0 + off))};|(int32_t)(slot - (c->pos0 + off) + 1)};|test_move|a moved chunk's keys are rotated by exactly the position delta
selective_misses_seam_token|src/rag/repair/strategies.c|    *hi = doc_len;\n}|    *hi = doc_len - 1;\n}|test_repair_select:selective_recomputes_tokens_before_seams|selective recomputes the last overlap tokens before each seam
firstk_takes_last_k|src/rag/repair/firstk.c|    *lo = 0;\n    *hi = p->first_k < doc_len ? p->first_k : doc_len;|    *lo = doc_len - (p->first_k < doc_len ? p->first_k : doc_len);\n    *hi = doc_len;|test_repair_select:firstk_recomputes_document_starts|firstk recomputes the first k tokens of each document
cacheblend_ranking_inverted|src/rag/repair/blend.c|if (x->dev != y->dev) return x->dev > y->dev ? -1 : 1;|if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;|test_repair_select:cacheblend_v_l2_picks_planted_tokens|cacheblend recomputes the most deviating tokens
cacheblend_seams_dropped|src/rag/repair/cacheblend.c|if (!job->p->cacheblend_seams) return NULL;|if (job->p->cacheblend_seams >= 0) return NULL;|test_repair_select:cacheblend_seams_keep_tokens_before_seams|cacheblend + seams keeps selective's tokens
full_skips_layer0|src/rag/repair/full.c|    *l0 = 0;|    *l0 = 1;|test_repair_select:full_gives_cold_prefill_bits_at_every_layer|full gives a cold prefill's bits
executor_skips_last_layer|src/rag/repair/repair.c|kvs_rowset_layers(f, kv, &rs, l0, n_layer);|kvs_rowset_layers(f, kv, &rs, l0, n_layer - 1);|test_repair_select:full_recomputes_every_moved_token|a recomputed token is recomputed through the last layer
narrowing_share|src/rag/repair/blend.c|pow((double)p->recompute_ratio / p->narrow_from, (double)j / L)|pow((double)p->recompute_ratio / p->narrow_from, (double)j / (L + 1))|test_repair:narrowing_params|gradual narrowing shrinks geometrically to the ratio
payload_checksum_ignored|src/kv/disk.c|    if (kvs_checksum64_final(&cs) != hd.payload_sum)\n|    if (0 && kvs_checksum64_final(&cs) != hd.payload_sum)\n|test_kv_disk test_prefix_reuse_disk:test_damaged_payload_never_served test_tiers|a damaged payload is detected and never served (kvs_disk_load_payload)
payload_checksum_ignored_kv|src/kv/disk.c|!= hd.payload_sum) FAIL(KVS_DISK_BAD_PAYLOAD|!= hd.payload_sum && 0) FAIL(KVS_DISK_BAD_PAYLOAD|test_kv_disk test_prefix_reuse_disk:test_damaged_payload_never_served test_tiers|a damaged payload is detected and never served (kvs_disk_read_into_kv)
publish_without_rename|src/kv/disk.c|if (ok && rename(tmp, final)) {|if (ok && 0) {|test_kv_disk|entries are published by rename (readers see whole files only)
fp_probe_left_out|src/cache/fingerprint.c|    kvs_sha256_update(&h, probe, 32);|    (void)probe;|test_fingerprint:numerics_probe_never_served|a build that rounds differently does not see the entries
fp_weights_left_out|src/cache/fingerprint.c|    kvs_sha256_update(&h, wd, 32);|    (void)wd;|test_fingerprint:weights_digest_never_served|another model's entries are never served
fp_kv_dtype_left_out|src/cache/fingerprint.c|    put_u32(&h, (uint32_t)kv_type + (perturbed(KVS_FP_PERTURB_KV_TYPE) ? 16u : 0u));|    (void)perturbed;|test_fingerprint:kv_dtype_never_served|entries of another KV dtype are never served
fp_rope_left_out|src/cache/fingerprint.c|    put_f32(&h, hp->rope_freq_base * (perturbed(KVS_FP_PERTURB_ROPE) ? 2.0f : 1.0f));|    (void)0;|test_fingerprint:rope_never_served|entries of another RoPE configuration are never served
fp_tensors_left_out|src/cache/fingerprint.c|        put_u64(&h, t->offset + (uint64_t)(i == 0 && perturbed(KVS_FP_PERTURB_TENSORS)));|        (void)t;|test_fingerprint:tensor_directory_never_served|entries of another tensor directory are never served
fp_layers_left_out|src/cache/fingerprint.c|    put_layers(&h, hp);|    (void)0;|test_fingerprint:layers_never_served|a model whose attention window differs past the probe's tokens never gets the entries
fp_metadata_left_out|src/cache/fingerprint.c|    put_metadata(&h, g);|    (void)0;|test_fingerprint:edited_metadata_never_served|a file whose metadata was edited never gets the original's entries
redis_reply_per_read|src/kv/redis_pipe.c|            if (ok && kvs_redis_reply_by(c, due + cb_ns, &r)) ok = 0;|            if (ok && redisGetReply(ctx[k], (void **)&r) != REDIS_OK) ok = 0;|test_redis_tier:trickled_reply_bounded_by_budget|a Redis that trickles its reply costs one budget, not as long as it keeps sending
disk_bound_counts_unowned|src/kv/disk_budget.c|            bytes -= v[i].bytes;|            (void)0;|test_tiers:bound_ignores_files_not_its_own|a file the cache never removes does not make it evict its own entries
bpe_merge_order|src/tokenizer/bpe.c|(x->rank == y->rank && x->left < y->left);|(x->rank == y->rank && x->left > y->left);|test_tokenizer_vectors test_tokenizer_smollm2|BPE merges the lowest-ranked pair, leftmost first
sampler_top_k_plus_one|src/engine/sampler.c|int k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;|int k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k + 1 : n;|test_sampler|the sampler keeps exactly top_k candidates
llama3_factors_dropped|src/model/rope_scaling.c|lh->rope_freq_factors = lh->window ? NULL : ff;|lh->rope_freq_factors = NULL;|test_arch_random:arch_random_logits_match_reference|Llama 3 RoPE frequency factors are applied (rope_freqs.weight and the scaling keys)
llama3_no_smooth_band|src/model/rope_scaling.c|ff = 1.0 / ((1.0 - smooth) / factor + smooth);|ff = 1.0;|test_arch_random:arch_random_logits_match_reference|the llama3 factors from keys interpolate the middle band as HF does
qwen3_q_norm_skipped|src/model/forward.c|        if (w->q_norm)|        if (0 && w->q_norm)|test_arch_random:arch_random_logits_match_reference|per-head Q norm (qwen3, gemma3) is applied
move_ignores_freq_factors|src/rag/move.c|rc->layer[l].rope_freq_factors, type,|NULL, type,|test_move_layers|a moved key is rotated with its layer's Llama 3 frequency factors
frequency_penalty_ignores_count|src/engine/sampler.c|s->p.frequency_penalty * (float)s->counts[t] + s->p.presence_penalty|s->p.frequency_penalty + s->p.presence_penalty|test_sampler:test_presence_and_frequency_penalties|the frequency penalty grows with each use of a token
packed_tile_tail_lane|src/kernels/pack.c|for (int v = 0; v < nvec; v++) memcpy(out + 32 * v + 4 * o, blk + qoff + 4 * v, 4);|for (int v = 0; v < nvec; v++) memcpy(out + 32 * v + 4 * (o ^ (v == 1)), blk + qoff + 4 * v, 4);|test_kernels_packed:test_packed_equals_scalar|packed rows: a whole tile's transposed tail blocks give every row its own weights (the scalar bits)
packed_q8_tail_pair|src/kernels/pack.c|for (int u = 0; u < 16; u++) memcpy(out + 16 * u + 2 * o, blk + qoff + 2 * u, 2);|for (int u = 0; u < 16; u++) memcpy(out + 16 * u + 2 * (o ^ (u == 3)), blk + qoff + 2 * u, 2);|test_kernels_packed:test_packed_equals_scalar|packed rows: a whole Q8_0 tile's tail pairs give every row its own weights (the scalar bits)
avx512_packed_tail_halves|src/kernels/matmul_avx512_m1.c|const uint8_t *b = kvs_packed_tile_tail(w, j0 + KVS_PACK_TILE) + (size_t)t * KVS_PACK_TILE * bs;|const uint8_t *b = kvs_packed_tile_tail(w, j0) + (size_t)t * KVS_PACK_TILE * bs;|test_kernels_packed:test_packed_equals_scalar|AVX-512 on packed Q4 rows: the 16 rows' tail blocks come from both 8-row tiles (the scalar bits)
avx512_packed_group_scale|src/kernels/avx512_util.h|    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 256)));|    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 258)));|test_kernels_packed:test_packed_equals_scalar|AVX-512 on packed Q4 rows: block l of a group takes its own scale (the scalar bits)
avx512_q8_packed_scale|src/kernels/avx512_util.h|    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 512)));|    *dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + 514)));|test_kernels_packed:test_packed_equals_scalar|AVX-512 on packed Q8_0 rows: block l of a group takes its own scale (the scalar bits)
avx512_q8_corr_chains|src/kernels/avx512_util.h|for (int r = 0; r < 4; r++) s[r] = _mm512_dpbusd_epi32(s[r], c128, W[r + 4]);|for (int r = 0; r < 4; r++) s[r] = _mm512_dpbusd_epi32(s[r], c128, W[r]);|test_kernels:test_matmul_simd_equals_scalar|AVX-512 Q8_0: the x + 128 correction sums all 32 weight bytes of a block (the scalar bits)
avx512_q8_tail_words|src/kernels/matmul_avx512_m1.c|    0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,|    8, 0, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,|test_kernels_packed:test_packed_equals_scalar|AVX-512 decode on packed Q8_0 tiles: a row's tail dword takes its two word pairs in order (the scalar bits)
avx512_prep_tail_half|src/kernels/matmul_avx512.c|prep_tail_packed(type, tail + (size_t)t * KVS_PACK_TILE * bs, j0 & 4, &out[t]);|prep_tail_packed(type, tail + (size_t)t * KVS_PACK_TILE * bs, 0, &out[t]);|test_kernels_packed:test_packed_equals_scalar|AVX-512 prefill on packed tiles: rows 4..7 of a tile take their own tail blocks (the scalar bits)
avx512_prep_tiles_tails|src/kernels/matmul_avx512.c|const prep_grp *tw = pw + (size_t)((jt - jb) / NR) * per_tile, *tt = tw + NR * ng;|const prep_grp *tw = pw + (size_t)((jt - jb) / NR) * per_tile, *tt = pw + NR * ng;|test_kernels:test_matmul_simd_equals_scalar|AVX-512 prefill: each column tile prepared together with others keeps its own tail blocks (the scalar bits)
avx512_f8_lanes|src/kernels/matmul_avx512.c|for (int j = 0; j < 2; j++) T[4 * ((2 * i + j) % 4) + (2 * i + j) / 4] = C[i][j];|for (int j = 0; j < 2; j++) T[4 * ((2 * i + j) % 4) + (2 * i + j) / 4] = C[i ^ (i == 5)][j];|test_kernels:test_matmul_float_k_tails|AVX-512 float weights, 8 x 2 tiles (8 streams): each output leaves the tree in its own lane (the scalar bits)
avx512_quant_group_id_lane|src/kernels/matmul_avx512.c|const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), id);|const __m512 idb = _mm512_permutexvar_ps(_mm512_set1_epi32(b ^ (b == 9)), id);|test_kernels:test_matmul_simd_equals_scalar|AVX-512 quantizer, 16 blocks at once: each block scales by its own 1 / d (the scalar bits)
avx512_quant_group_q40_word|src/kernels/matmul_avx512.c|_mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 3)) : sum);|_mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 2)) : sum);|test_kernels:test_matmul_simd_equals_scalar|AVX-512 quantizer, 16 blocks at once: Q4_0 weights get the -8 sum Q word (the scalar bits)
avx512_pv_shared_block|src/kernels/attention_avx512.c|for (int b = 0; b < nb; b++) acc[b][dd] = _mm512_fmadd_ps(e[b], vb, acc[b][dd]);|for (int b = 0; b < nb; b++) acc[b][dd] = _mm512_fmadd_ps(e[b == 2 ? 1 : b], vb, acc[b][dd]);|test_kernels:test_attention_simd_equals_scalar|AVX-512 prefill attention: row blocks sharing each V broadcast keep their own probabilities (the reference bits)
avx512_pv_own_keys|src/kernels/attention_avx512.c|for (int j = nmin; j < nkr[b]; j++) {|for (int j = nmin + 1; j < nkr[b]; j++) {|test_kernels:test_attention_simd_equals_scalar|AVX-512 prefill attention: a row block's keys past the ones all blocks share are still added (the reference bits)
float_decode_pair_stride|src/kernels/matmul_avx2.c|tile_f_any(data + (size_t)j * w->row_bytes, (size_t)h * w->row_bytes, c->x, k, c->y + j, 0, (size_t)h, 1, 2,|tile_f_any(data + (size_t)j * w->row_bytes, (size_t)(h + 1) * w->row_bytes, c->x, k, c->y + j, 0, (size_t)h, 1, 2,|test_kernels:test_matmul_float_decode_chunks|float-weight decode: each output row meets its own weight row (the two-stream pairing gives the scalar bits)
packed_decode_halves_crossed|src/kernels/matmul_avx2_packed.c|tile_out8(c, jb, (const __m256(*)[2])CB, nt, xt, yrow);|tile_out8(c, jb, (const __m256(*)[2])CA, nt, xt, yrow);|test_kernels_packed:test_packed_equals_scalar|packed decode: each of the two halves read side by side gets its own rows' outputs (the scalar bits)
packed_tail4_rows_crossed|src/kernels/matmul_avx2_packed.c|s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(wa, _mm256_set1_epi32(q1[v])));|s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(wa, _mm256_set1_epi32(q2[v])));|test_kernels_packed:test_packed_equals_scalar|packed rows, several activation rows: the tail blocks taken four rows at a time give each row its own dot (the scalar bits)
packed_tree4_pairs|src/kernels/avx2_util.h|_mm256_shuffle_ps(c, c, 0xDD));|_mm256_shuffle_ps(c, c, 0x88));|test_kernels_packed:test_packed_equals_scalar|packed rows, several activation rows: four outputs' trees at once add the reference's pairs (the scalar bits)
kq_tile_tails_crossed|src/kernels/kquant_avx2_batch.c|*a1 = tail_step(*a1, w[0], I[0], x, sh, cnt, 1);|*a1 = tail_step(*a1, w[0], I[0], x, sh, cnt, 0);|test_kquant:test_kq_simd_equals_scalar|Q5_0 / K-quant batch tiles: two rows' short tails merged into one octet give each row its own blocks (the scalar bits)
kq_tile_int16_overflow|src/kernels/kquant_avx2_octet.h|X(q5_0, KVS_TYPE_Q5_0, 4, 0, 0, 4)|X(q5_0, KVS_TYPE_Q5_0, 4, 0, 0, 8)|test_kquant:test_kq_integer_extremes|Q5_0 batch tiles: int16 sums are widened before they can overflow (the scalar bits)
kq_tile_int16_overflow_q6k|src/kernels/kquant_avx2_octet.h|X(q6_k, KVS_TYPE_Q6_K, 5, 1, 0, 2)|X(q6_k, KVS_TYPE_Q6_K, 5, 1, 0, 4)|test_kquant:test_kq_integer_extremes|Q6_K batch tiles: int16 sums are widened before they can overflow (the scalar bits)
kq_long_rows_layout|src/kernels/kquant_avx2.c|kq_quantize_lanes(x, k, xrow, kq_lanes(k, m) ? 8 : 0);|kq_quantize_lanes(x, k, xrow, m > 1 ? 8 : 0);|test_kquant:test_kq_simd_equals_scalar|K-quant rows too long for the batch buffer: several activation rows are quantized in the order decode reads (the scalar bits)
kq512_long_rows_layout|src/kernels/kquant_avx512.c|kq_quantize_lanes(x, k, xrow, kq_lanes(k, m) ? 16 : KQ_PAIRS);|kq_quantize_lanes(x, k, xrow, m > 1 ? 16 : KQ_PAIRS);|test_kquant:test_kq_simd_equals_scalar|AVX-512 K-quant rows too long for the batch buffer: several activation rows are quantized in the order its decode reads (the scalar bits)
kq512_tail_rows_crossed|src/kernels/kquant_avx512_batch.c|A[1] = _mm512_mask_shuffle_f32x4(A[1], 0x000f, C, C, 1);|A[1] = _mm512_mask_shuffle_f32x4(A[1], 0x000f, C, C, 2);|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q5_0 / K-quant batch tiles: four weight rows sharing a last hexadecet each get their own chains back (the scalar bits)
kq512_tail_pair_crossed|src/kernels/kquant_avx512_batch.c|A[2 * t + 1] = _mm512_mask_shuffle_f32x4(A[2 * t + 1], 0x00ff, C, C, 0x0e);|A[2 * t + 1] = _mm512_mask_shuffle_f32x4(A[2 * t + 1], 0x00ff, C, C, 0x04);|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q5 / K-quant batch tiles: two weight rows sharing a last hexadecet each get their own chains back (the scalar bits)
kq512_tail_mask|src/kernels/kquant_avx512_batch.c|const __mmask16 k = (__mmask16)((1u << cnt) - 1);|const __mmask16 k = (__mmask16)((1u << (cnt + 1)) - 1);|test_kquant:test_kq_simd_equals_scalar|AVX-512 batch tiles: the last hexadecet's steps leave the chains past the row as they were (the scalar bits)
kq512_split_halves|src/kernels/kquant_avx512_batch.c|if (sh.split && r == 3)\n#pragma GCC unroll 4\n            for (int q = 0; q < 4; q++) {|if (sh.split && r == 4)\n#pragma GCC unroll 4\n            for (int q = 0; q < 4; q++) {|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q6_K batch tiles (rows by pairs): each half of a block meets its own scale (the scalar bits)
kq512_split_halves_single|src/kernels/kquant_avx512_batch.c|if (sh.split && r == 3)\n#pragma GCC unroll 4\n            for (int q = 0; q < nw; q++)|if (sh.split && r == 4)\n#pragma GCC unroll 4\n            for (int q = 0; q < nw; q++)|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q6_K batch tiles (a single row, a short last hexadecet): each half of a block meets its own scale (the scalar bits)
kq512_tree_pairs|src/kernels/kquant_avx512_batch.c|const __m512 c = _mm512_add_ps(b, _mm512_permute_ps(b, 0xEE));\n    const __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, 0x55));|const __m512 c = _mm512_add_ps(b, _mm512_permute_ps(b, 0xB1));\n    const __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, 0xAA));|test_kquant:test_kq_simd_equals_scalar|AVX-512 batch tiles: four outputs' trees pair the chains as the reference does ((b0 + b2) + (b1 + b3): the scalar bits)
kq512_quant_tail_copy|src/kernels/kquant_avx2_octet.h|const int b = g0 + o + l, src = (o + l) % span;|const int b = g0 + o + l, src = o + l;|test_kquant:test_quantize_rows_simd_equals_scalar,test_kq_simd_equals_scalar|lane layouts: a short last group's activation lanes are copied for the weight rows that share it (the scalar bits)
kq512_decode_pairs_order|src/kernels/kquant_avx512.c|_mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0)|_mm512_setr_epi32(0, 1, 9, 8, 2, 3, 10, 11, 0, 0, 0, 0, 0, 0, 0, 0)|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q5 / K-quant decode: each block's half sums land in its own lane (the scalar bits)
kq512_decode_fifth_bits|src/kernels/kquant_avx512_pairs.h|lo = with_fifth_bits(lo, hb, 4 * h, 4 * h + 2);|lo = with_fifth_bits(lo, hb, 4 * h + 2, 4 * h);|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q5_0 / Q5_K decode: each block of a pair takes its own 5th bits (the scalar bits)
kq512_decode_q6k_high_bits|src/kernels/kquant_avx512_pairs.h|_mm256_set1_epi16((short)(2 * (p % 2) + 4)), 1);|_mm256_set1_epi16((short)(2 * (p % 2) + 2)), 1);|test_kquant:test_kq_simd_equals_scalar|AVX-512 Q6_K decode: each sub-block of a pair takes its own two high bits (the scalar bits)
kq512_decode_layout|src/kernels/kquant_avx2_octet.h|return (size_t)(128 * ((l / 4) * 2 + l % 2) + 32 * ((l / 2) % 2));|return (size_t)(128 * ((l / 4) * 2 + (l / 2) % 2) + 32 * (l % 2));|test_kquant:test_kq_simd_equals_scalar,test_quantize_rows_simd_equals_scalar|AVX-512 decode: the activation row's block pairs are those the weight nibbles come in (the scalar bits)
kq512_decode_q5_gguf_bits|src/kernels/kquant_avx512_pairs.h|if (b < cnt) memcpy(&hb, pb + qh_at, 4);|if (b < cnt) memcpy(&hb, pa + qh_at, 4);|test_kquant:test_kq_simd_equals_scalar|AVX-512 decode of Q5 blocks in GGUF layout (a packed row's short last octet): each block of a pair takes its own 5th bits (the scalar bits)
kq512_hexa_order|src/kernels/kquant_avx512_batch.c|const __m512i order = _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15);|const __m512i order = _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 15, 14);|test_kquant:test_kq_simd_equals_scalar|AVX-512 batch tiles: a hexadecet unpacked from block pairs puts every block in its own lane (the scalar bits)
kq512_decode_hexa_halves|src/kernels/kquant_avx512.c|t0, _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 16, 17, 24, 25, 18, 19, 26, 27), t1);|t0, _mm512_setr_epi32(0, 1, 8, 9, 2, 3, 10, 11, 16, 17, 24, 25, 18, 19, 27, 26), t1);|test_kquant:test_kq_simd_equals_scalar|AVX-512 decode: a hexadecet's two octets' half sums land in their blocks' lanes (the scalar bits)
kq512_rows2_trailer|src/kernels/kquant_avx512_batch.c|const hx_ops op1 = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I1[q], &a1, sh);|const hx_ops op1 = hx_ops_of(w[q]->dw0, w[q]->dw1, w[q]->mw, I1[q], &a0, sh);|test_kquant:test_kq_simd_equals_scalar|AVX-512 batch tiles: two activation rows taken together each keep their own scales and sums (the scalar bits)
kq_tile_tail_half|src/kernels/kquant_avx2_batch.c|if (o % 2 == 0) tile_tail(|if (1) tile_tail(|test_kquant:test_kq_simd_equals_scalar|Q5 batch tiles: a partial last octet at an odd position steps chains 8-15 (the scalar bits)
kq_octet_offset_half|src/kernels/kquant_avx2_octet.h|_mm256_sub_epi32(_mm256_add_epi32(H0, H1), _mm256_add_epi32(o0, o1))|_mm256_sub_epi32(_mm256_add_epi32(H0, H1), o0)|test_kquant:test_kq_simd_equals_scalar|Q5_0: both halves of an octet's activation offsets are subtracted, on the decode and batch paths alike (octet_ops_of)
serve_drain_cuts_replies|server/serve.c|    srv_http_wait_idle(&s, DRAIN_REPLY_GRACE_MS);\n|    (void)0;\n|test_serve.sh|SIGTERM: every request already received is answered before HTTP stops
serve_drain_misses_admitted|server/sched.c|        if (j) s->n_active++;|        (void)0;|test_serve.sh|SIGTERM: a queued request taken off the queue is still finished
logprobs_unnormalized|src/engine/sampler.c|const double lse = (double)max + log(sum);|const double lse = (double)max;|test_sampler:test_logprobs|log-probabilities are the log-softmax (they sum to one)
serve_logprobs_of_cut_stop|server/slot.c|while (n < s->n_lp && s->lp[n].offset < upto) n++;|while (n < s->n_lp && s->lp[n].offset <= s->gen_len) n++;|test_serve.sh|serve logprobs: a token goes out with its text (none for a cut stop string)
serve_logit_bias_ignored|server/slot.c|    if (r->n_bias == 0) return logits;|    if (r->n_bias >= 0) return logits;|test_serve.sh|serve: logit_bias changes what is sampled
serve_prefix_not_shared_in_flight|server/slot.c|    return whole_chunks(c, env) - f->n_kv >= env->chunk_tokens;|    return 0 * c;|test_serve.sh:share_their_prefix|serve: prompts arriving together compute their shared prefix once
serve_docs_not_shared_in_flight|server/slot.c|    if (waits_for_docs(f, l, l_first)) return 1;|    if (0 * waits_for_docs(f, l, l_first)) return 1;|test_serve.sh:documents_computed_once|serve: documents requests arriving together compute each shared document once
serve_json_duplicate_keys|server/request.c|        if (!strcmp(names[i - 1]->string, names[i]->string)) dup = names[i]->string;|        (void)names;|test_serve.sh:strict_json|serve: a key twice in one object is refused (a second, invalid value cannot slip past)
serve_utf8_field_unchecked|server/job.c|        if (check_utf8(model, r->msgs[i].content, param, err)) return -1;|        (void)param;|test_serve.sh:strict_json|serve: invalid UTF-8 in a message is refused naming its field
serve_two_content_length_counted_once|server/http.c|if (!strcasecmp(key, "Content-Length")) f->content_length++;|if (!strcasecmp(key, "Content-Length")) f->content_length = 1;|test_serve.sh|two Content-Length headers are refused (request smuggling)
serve_413_after_the_body|server/http.c|    if (errno != ERANGE && n <= s->max_body) return 0;|    if (errno != ERANGE) return 0;|test_serve.sh|a Content-Length over --max-body is answered 413 before any of the body is read
serve_read_timeout_ignored|server/http.c|s->read_timeout_s, MHD_OPTION_CONNECTION_LIMIT|(unsigned)600, MHD_OPTION_CONNECTION_LIMIT|test_serve.sh|a connection silent before its request is complete is closed after --read-timeout (slowloris)
kq_multi_chunk_dropped|src/kernels/kquant.c|mt.first[i + 1] = mt.first[i] + (w->n + cols - 1) / cols;|mt.first[i + 1] = mt.first[i] + (w->n + cols - 1) / cols - (i == 1);|test_kquant:test_kq_multi_equals_separate|Q5 / K-quant matrices on one x: every matrix's columns are computed (the bytes of separate calls)
float_batch_block_edge|src/kernels/matmul_avx2.c|const int b1 = b0 + F_BLOCK < j1 ? b0 + F_BLOCK : j1;|const int b1 = b0 + F_BLOCK < j1 ? b0 + F_BLOCK - 1 : j1;|test_kernels:test_matmul_float_decode_chunks|float-weight batched decode: the blocks of a chunk cover every column (the scalar bits)
attn_prefill_unmasked_edge|src/kernels/attention_avx2.c|j0 + j + n <= sb->open_hi|j0 + j + n <= sb->open_hi + 1|test_kernels:test_attention_simd_equals_scalar|prefill attention: only keys every row of the block sees skip the causal mask (the scalar bits)
attn_prefill_unmasked_lo|src/kernels/attention_avx2.c|if (lv[l] > open_lo[rb]) open_lo[rb] = lv[l];|(void)lv;|test_attention_window:test_window_vs_double|prefill attention: keys below a sliding window stay masked on the unmasked path
attn_split_dims_overlap|src/kernels/attention_avx2_decode.c|const int d0 = u % per_g * 32;|const int d0 = u % per_g * 32 / 2;|test_kernels_invariance:test_attention_decode_split|split decode attention: every 32-dim slab of the outputs is computed (the units' bits)
attn_split_keys_gap|src/kernels/attention_avx2_decode.c|const int j0 = s.jmin + (u % per_g) * SPLIT_KEYS,|const int j0 = s.jmin + (u % per_g) * SPLIT_KEYS + 8 * (u % per_g > 0),|test_kernels_invariance:test_attention_decode_split|split decode attention: the score units cover every key (the units' bits)
q8_avx2_prefill_unmasked_hi|src/kernels/attention_q8_avx2.c|if (nv[l] < x->all_hi[b]) x->all_hi[b] = nv[l];|if (nv[l] > x->all_hi[b]) x->all_hi[b] = nv[l];|test_attention_random|AVX2 Q8 prefill attention: only keys every row of the block sees skip the causal mask (the scalar bits)
q8_avx2_prefill_unmasked_lo|src/kernels/attention_q8_avx2.c|if (lv[l] > x->all_lo[b]) x->all_lo[b] = lv[l];|(void)lv;|test_attention_random|AVX2 Q8 prefill attention: keys below a row's window stay masked on the unmasked path (the scalar bits)
q8_avx2_live_pairs_low_lanes|src/kernels/attention_q8_avx2.c|nl += !_mm256_testz_si256(w, w);|nl += !_mm_testz_si128(_mm256_castsi256_si128(w), _mm256_castsi256_si128(w));|test_attention_random test_kernels|AVX2 Q8 prefill attention: a pair is live where any lane's level is not 0 (the scalar bits)
q8_avx2_live_pairs_one_block|src/kernels/attention_q8_avx2.c|if (nb == 2) w = _mm256_or_si256(w, _mm256_loadu_si256((const __m256i *)(p + bstride)));|(void)bstride;|test_attention_random test_kernels|AVX2 Q8 prefill attention: a P.V pass skips only pairs whose levels are 0 in both its blocks (the scalar bits)
q8_avx2_live_pairs_offset|src/kernels/attention_q8_avx2.c|PV_PAIR(p + (size_t)live[n] * RB, v + (size_t)live[n] * 16);|PV_PAIR(p + (size_t)live[n] * RB, v + (size_t)n * 16);|test_attention_random test_kernels|AVX2 Q8 prefill attention: a listed pair's values are its own (the scalar bits)
q8_avx2_dec_live_low_pairs|src/kernels/attention_q8_avx2_decode.c|_mm256_setzero_si256()))) & 0xffu;|_mm256_setzero_si256()))) & 0x0fu;|test_attention_random test_kernels|AVX2 Q8 decode attention: every pair of a group of 8 whose levels are not 0 is taken (the scalar bits)
q8_avx2_dec_live_first_row|src/kernels/attention_q8_avx2_decode.c|for (int r = 0; r < rows; r++) w = _mm256_or_si256(|for (int r = 0; r < 1; r++) w = _mm256_or_si256(|test_attention_random test_kernels|AVX2 Q8 decode attention: a pair is live where any row's levels are not 0 (the scalar bits)
q8_avx2_dec_live_tail|src/kernels/attention_q8_avx2_decode.c|for (int k = 0; j + 2 * k < b1; k++) {|for (int k = 1; j + 2 * k < b1; k++) {|test_attention_random test_kernels|AVX2 Q8 decode attention: a block's last pairs (fewer than 8) are all scanned (the scalar bits)
q8_avx2_dec_live_offset|src/kernels/attention_q8_avx2_decode.c|PV_PAIR16(b0 + 2 * live[n]);|PV_PAIR16(b0 + 2 * n);|test_attention_random test_kernels|AVX2 Q8 decode attention: a listed pair's values and levels are its own (the scalar bits)
q8_avx2_dec_live_skip_block|src/kernels/attention_q8_avx2_decode.c|if (!nl) continue; /* every sum 0: o + (+0) is o */|if (!nl) break; /* every sum 0: o + (+0) is o */|test_attention_random test_kernels test_kernels_invariance:test_attention_decode_split|AVX2 Q8 decode attention: a block whose levels are all 0 is skipped, not the blocks after it (the scalar bits)
q8_avx512_dec_live_half|src/kernels/attention_q8_avx512_decode.c|_mm512_storeu_si512(out + n0, _mm512_maskz_compress_epi32((__mmask16)(m >> 16),|_mm512_storeu_si512(out + n0, _mm512_maskz_compress_epi32((__mmask16)(m >> 16) & 0xff,|test_attention_random test_kernels|AVX-512 Q8 decode attention: every live group of a pass's second 16 is listed (the scalar bits)
q8_avx512_dec_live_first_row|src/kernels/attention_q8_avx512_decode.c|for (int r = 1; r < nr; r++) w = _mm512_or_si512(|for (int r = 1; r < nr - 1; r++) w = _mm512_or_si512(|test_attention_random test_kernels|AVX-512 Q8 decode attention: a group is live where any row's lo word is not 0 (the scalar bits)
q8_avx512_dec_live_tail|src/kernels/attention_q8_avx512_decode.c|const __mmask8 in = ng - k >= 8 ? 0xff : (__mmask8)((1u << (ng - k)) - 1);|const __mmask8 in = ng - k >= 8 ? 0xff : (__mmask8)((1u << (ng - k - 1)) - 1);|test_attention_random test_kernels|AVX-512 Q8 decode attention: a pass's last groups (fewer than 8) are all tested (the scalar bits)
q8_avx512_dec_live_offset|src/kernels/attention_q8_avx512_decode.c|const __m512i pl = _mm512_set1_epi32(P[r][2 * (g0 + q)]);|const __m512i pl = _mm512_set1_epi32(P[r][2 * (g0 + k)]);|test_attention_random test_kernels|AVX-512 Q8 decode attention: a listed group's levels are its own (the scalar bits)
q8_avx512_dec_lo_two_keys|src/kernels/attention_q8_avx512_decode.c|const __m512i lo_word = _mm512_set1_epi64(0xffffffffll)|const __m512i lo_word = _mm512_set1_epi64(0xffff0000ll)|test_attention_random test_kernels|AVX-512 Q8 decode attention: a group is live where any of its 4 keys' lo bytes is not 0 (the scalar bits)
q8_avx512_pre_listed_offset|src/kernels/attention_q8_avx512.c|p[b] = _mm512_loadu_si512(pl + b * pstride + 32 * g + w);|p[b] = _mm512_loadu_si512(pl + b * pstride + 32 * i + w);|test_attention_random test_kernels|AVX-512 Q8 prefill attention: a listed group's weights are its own (the scalar bits)
q8_avx512_pre_lo_by_hi|src/kernels/attention_q8_avx512.c|ls.nlo += _mm512_test_epi32_mask(l, l) != 0;|ls.nlo += _mm512_test_epi32_mask(h, h) != 0;|test_attention_random test_kernels|AVX-512 Q8 prefill attention: a group whose lo bytes are not 0 is summed, whatever its hi bytes (the scalar bits)
q8_avx512_pre_live_first_block|src/kernels/attention_q8_avx512.c|            for (int b = 1; b < nb; b++) {\n                l = _mm512_or_si512(|            for (int b = 1; b < nb - 1; b++) {\n                l = _mm512_or_si512(|test_attention_random test_kernels|AVX-512 Q8 prefill attention: a group is live where any row block's bytes are not 0 (the scalar bits)
q8_avx2_split_keys_gap|src/kernels/attention_q8_avx2_decode.c|const int ja = dr.jmin + u % per_g * SPLIT_KEYS,|const int ja = dr.jmin + u % per_g * SPLIT_KEYS + 8 * (u % per_g > 0),|test_kernels_invariance:test_attention_decode_split test_attention_random|AVX2 Q8 split decode attention: the score units cover every key (the units' bits)
q8_avx2_split_dims_skipped|src/kernels/attention_q8_avx2_decode.c|per_g = D / dims, da = u % per_g * dims;|per_g = D / dims, da = u % per_g * dims / 2;|test_kernels_invariance:test_attention_decode_split test_attention_random|AVX2 Q8 split decode attention: every dim range of the outputs is computed (the units' bits)
q8_avx2_split_max_order|src/kernels/attention_q8_avx2_decode.c|mx = _mm256_max_ps(_mm256_loadu_ps(row + j), mx);|mx = _mm256_max_ps(mx, _mm256_loadu_ps(row + j));|test_kernels_invariance:test_attention_decode_split|AVX2 Q8 split decode attention: the maxima are taken in the unit's operand order (NaN scores)
q8_avx2_split_max_from_zero|src/kernels/attention_q8_avx2_decode.c|__m256 mx = _mm256_set1_ps(-INFINITY);|__m256 mx = _mm256_set1_ps(0.0f);|test_kernels_invariance:test_attention_decode_split test_attention_random|AVX2 Q8 split decode attention: a row's maximum starts at -inf (rows whose scores are all negative)
avx512_split_keys_gap|src/kernels/attention_avx512_decode.c|const int ja = u.jmin + (un % per_g) * kpu;|const int ja = u.jmin + (un % per_g) * kpu + 32 * (un % per_g > 0);|test_kernels_invariance:test_attention_decode_split|AVX-512 split decode attention: the score units cover every key (the units' bits)
avx512_split_whole_heads|src/kernels/attention_avx512_decode.c|const int d1 = un < whole ? c->head_dim : d0 + SPLIT_DIMS;|const int d1 = un < whole ? c->head_dim / 2 : d0 + SPLIT_DIMS;|test_kernels_invariance:test_attention_decode_split|AVX-512 split decode attention: a head taken whole gets all its dims (3 kv heads on 2 threads)
avx512_split_max_order|src/kernels/attention_avx512_decode.c|for (int j = u.jmin; j < maxn; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(S + j));|for (int j = u.jmin; j < maxn; j += 16) mx = _mm512_max_ps(_mm512_loadu_ps(S + j), mx);|test_kernels_invariance:test_attention_decode_split|AVX-512 split decode attention: the maxima are taken in the unit's operand order (NaN scores)
avx512_f16_tile_lanes|src/kernels/attention_avx512_decode.c|AI int t16_off(int dd) { return ((dd & 7) * 2 + (dd >> 4)) * 32 + ((dd >> 3) & 1) * 16; }|AI int t16_off(int dd) { return ((dd & 7) * 2 + ((dd >> 4) & (dd < 31))) * 32 + ((dd >> 3) & 1) * 16; }|test_kernels:test_attention_simd_equals_scalar|AVX-512 decode scores on f16 tiles: every dim of a 32-dim block is read where the transposition put it
attn_rows_shared_scratch|src/kernels/dispatch.c|t->unit[r](&t->call[r], 0, 1, g, t->work + (size_t)ith * t->thread_floats);|t->unit[r](&t->call[r], 0, 1, g, t->work);|test_kernels_invariance:test_attention_rows_equal_each_alone|row-batched decode attention: each thread scores in its own scratch
attn_rows_unit_order|src/kernels/dispatch.c|const int r = u / t->n_kv_head, g = u % t->n_kv_head;|const int r = u % t->n_kv_head, g = u / t->n_kv_head;|test_kernels_invariance:test_attention_rows_equal_each_alone|row-batched decode attention: unit u is (row u / kv heads, kv head u % kv heads)
recal_avx2_no_temperature|src/kernels/attention_avx2.c|v = _mm256_blendv_ps(v, _mm256_mul_ps(v, k->inv_t), sb->rcm);|v = _mm256_blendv_ps(v, v, sb->rcm);|test_attention_window:test_recal_simd_equals_scalar|APE recalibration: the AVX2 path gives the scalar bits
recal_outlives_request|src/engine/decode.c|    for (int i = 0; i < n; i++) kvs_kv_recal_end(&ctx->kv, pos[i]);|    (void)0;|test_recal:ends_with_the_request|a recalibration lasts for its request only
nonfinite_f16_exponent_bit|src/gguf/gguf_types.c|return enc == KVS_SCALE_F16 ? 0x7c00u :|return enc == KVS_SCALE_F16 ? 0x7e00u :|test_gguf:find_nonfinite_every_type|a quantized block whose f16 scale is inf or NaN is found (model load refuses it)
nonfinite_q6k_scale_place|src/gguf/gguf_types.c|[KVS_TYPE_Q6_K] = {"Q6_K", 256, 210, 1, F16, 1, {208}},|[KVS_TYPE_Q6_K] = {"Q6_K", 256, 210, 1, F16, 1, {0}},|test_gguf:find_nonfinite_every_type|the scale of a Q6_K block is the one checked
nonfinite_run_skipped|src/gguf/gguf_types.c|for (size_t b0 = 0; b0 < nblocks; b0 += step) {|for (size_t b0 = step; b0 < nblocks; b0 += step) {|test_gguf:find_nonfinite_every_type test_model:test_nonfinite_weights_named|every element of a float weight is checked at load
nonfinite_vec_unchecked|src/model/weights.c|    if (bad >= 0) return nonfinite_error(m, name, t->type, bad, 0);|    (void)bad;|test_model:test_nonfinite_weights_named|a norm vector with a NaN is refused at load, named
sampler_top_p_zero_accepted|src/engine/sampler.c|FF(top_p, 0.0f, 1.0f, 1, "in (0, 1] (1 = off)"),|FF(top_p, 0.0f, 1.0f, 0, "in (0, 1] (1 = off)"),|test_sampler:test_bad_params_named|top_p 0 (a silent greedy draw) is refused, naming top_p
generate_n_predict_unchecked|src/engine/generate.c|    if (p->n_predict < 0)\n|    if (0)\n|test_engine:test_generate_bad_params_named|n_predict < 0 is refused before any lookup, computation or store, naming the field
chat_role_unchecked|src/tokenizer/chat.c|    int st = check_roles(fam, msgs, n_msgs);|    int st = KVS_OK;\n    (void)check_roles;|test_chat:unknown_role_refused|a chat role the family does not know is refused, never written into the prompt
cli_number_leading_space|tools/cli_opts.c|static int number_start(const char *v) { return *v && !isspace((unsigned char)*v); }|static int number_start(const char *v) { return *v != 0; }|test_cli_mistakes.sh|CLI numbers: white space before a number is refused like white space after it
cli_repeated_option_kept_last|tools/cli_opts.c|        if (seen[o - cmd->opts] > 1 && !o->max_count && !o->repeatable)|        if (0)|test_cli_mistakes.sh|CLI: a single-valued option given twice is refused, not silently overridden
alignment_1_vector_mapped|src/model/weights.c|    if (!misaligned(t->data)) return t->data;|    if (1) return t->data;|test_model:test_alignment_1_misaligned_floats|float vectors of a general.alignment 1 file are read from float-aligned memory
dir_entry_over_bound_written|src/kv/tier_dir.c|    if (entry > d->max_bytes) {|    if (0) {|test_tiers:bound_below_one_entry_writes_nothing|an entry larger than the cache dir's bound is not written and is reported as not stored
bound_evicts_own_write|src/kv/disk_budget.c|        if (p->keep && !strcmp(e->name, p->keep)) continue;|        (void)0;|test_tiers:bound_keeps_the_entry_just_written|a write's own bound check never evicts the entry it just wrote
not_regular_counted_as_other|src/kv/disk_budget.c|if (entry_name(de->d_name) && !lstat_gone(dir, de->d_name)) u->not_regular++;|if (0) u->not_regular++;|test_tiers:non_regular_entry_names_counted_once|cache stats: an entry's name on a FIFO / directory / symlink counts once (unreadable), not also as other
ROWS

list_rows() { printf '%s\n' "$TABLE" | awk -F'|' 'NF >= 6 { printf "%-30s %s\n", $1, $6 }'; }
only=""
case "${1:-}" in
    --list) list_rows; exit 0;;
    --only) only=",${2:?--only needs IDs},";;
    "") ;;
    *) echo "usage: scripts/mutate.sh [--list] [--only ID[,ID...]]" >&2; exit 2;;
esac

t_start=$(date +%s)
scratch=$(mktemp -d /tmp/kvs-mutate.XXXXXX) || exit 1
if [ -z "${MUTATE_KEEP:-}" ]; then trap 'rm -rf "$scratch"' EXIT; trap 'exit 130' INT TERM; else echo "mutate: scratch tree $scratch (kept)"; fi
# The work tree as it is (tracked + untracked, not ignored), and the build
# directory to start warm (tar keeps mtimes, so make rebuilds only what a
# mutation touches).
git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$scratch" || exit 1
[ -d "$BUILD" ] && cp -a "$BUILD" "$scratch/build"
export KVSTITCH_SHARED="${KVSTITCH_SHARED:-$(readlink -f ../shared)}"
if [ -z "${KVSTITCH_MODEL:-}" ]; then KVSTITCH_MODEL=$(scripts/fetch-model.sh | tail -n 1) || exit 1; fi
export KVSTITCH_MODEL KVSTITCH_TEST_QUICK=1 KVSTITCH_CLI="$scratch/build/kvstitch"
echo "mutate: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# run_tests "spec..." -> 0 all passed; 1 a test failed (prints which)
run_tests() {
    local spec bin only_tests out rc
    for spec in $1; do
        bin=${spec%%:*}; only_tests=""; [[ "$spec" == *:* ]] && only_tests=${spec#*:}
        # x.sh:NAME[,NAME]: the script's own selection (test_serve.sh: pytest -k NAME or NAME)
        if [[ "$bin" == *.sh ]]; then out=$(cd "$scratch" && timeout 900 bash "tests/$bin" ${only_tests:+-k "${only_tests//,/ or }"} 2>&1); rc=$?
        else out=$(cd "$scratch" && KVSTITCH_TEST_ONLY="$only_tests" timeout 900 "build/tests/$bin" 2>&1); rc=$?; fi
        if [ $rc -ne 0 ] || grep -q '^FAIL ' <<<"$out"; then
            echo "$spec: $(grep -m1 '^FAIL ' <<<"$out" || echo "exit $rc")"; return 1
        fi
        if ! grep -q '^ok ' <<<"$out"; then echo "$spec: no test ran"; return 1; fi
    done
    return 0
}

targets() { local spec t=""; for spec in $1; do spec=${spec%%:*}; [[ "$spec" == *.sh ]] || t+=" build/tests/$spec"; done; echo "$t build/kvstitch"; }

mk() { make -C "$scratch" -j2 BUILD=build $1 >"$scratch/.make.log" 2>&1; }

# Baseline: every test named in a selected row passes on the unmutated tree.
# One run per binary: the union of the tests its rows name (all, if a row names none).
all_tests=$(printf '%s\n' "$TABLE" | awk -F'|' -v only="$only" 'NF >= 6 && (only == "" || index(only, "," $1 ",")) { print $5 }' \
    | tr ' ' '\n' | awk -F: 'NF { if (!($1 in sel)) { sel[$1] = $2; order[++n] = $1 }
        else if (sel[$1] != "" && $2 != "") sel[$1] = sel[$1] "," $2; else sel[$1] = "" }
        END { for (i = 1; i <= n; i++) printf "%s%s ", order[i], sel[order[i]] == "" ? "" : ":" sel[order[i]] }')
echo "mutate: baseline build and run of: $all_tests"
if ! mk "$(targets "$all_tests")"; then echo "mutate: the unmutated tree does not build:"; tail -20 "$scratch/.make.log"; exit 1; fi
if ! why=$(run_tests "$all_tests"); then echo "mutate: baseline FAILED ($why): fix the suite first"; exit 1; fi

killed=0; survived=0; broken=0; n=0; survivors=()
while IFS='|' read -r id file old new tests claim; do
    [ -n "$id" ] || continue
    [ -z "$only" ] || [[ "$only" == *",$id,"* ]] || continue
    n=$((n + 1)); t0=$(date +%s)
    if ! python3 - "$scratch/$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3].replace("\\n", "\n")
src = open(path).read()
if src.count(old) != 1:
    sys.exit(1)
open(path + ".orig", "w").write(src)
open(path, "w").write(src.replace(old, new))
PY
    then
        printf '%-30s NOT APPLIED (the text is not in %s exactly once: update the row)\n' "$id" "$file"
        broken=$((broken + 1)); continue
    fi
    if ! mk "$(targets "$tests")"; then
        result="BUILD FAILED"; broken=$((broken + 1)); why=$(grep -m1 'error' "$scratch/.make.log")
    elif why=$(run_tests "$tests"); then
        result="SURVIVED"; survived=$((survived + 1)); survivors+=("$id"); why="every test passed: $tests"
    else
        result="killed"; killed=$((killed + 1))
    fi
    mv "$scratch/$file.orig" "$scratch/$file"
    touch "$scratch/$file"
    printf '%-30s %-12s %4ss  %s\n' "$id" "$result" "$(( $(date +%s) - t0 ))" "$why"
done <<<"$TABLE"
mk "$(targets "$all_tests")" # leave the scratch build unmutated (MUTATE_KEEP)

secs=$(( $(date +%s) - t_start ))
[ ${#survivors[@]} -gt 0 ] && echo "survived: ${survivors[*]}"
echo "mutate: $killed killed, $survived survived, $broken not applied or not built, of $n mutations in ${secs}s"
[ "$survived" -eq 0 ] && [ "$broken" -eq 0 ] && [ "$killed" -gt 0 ]
