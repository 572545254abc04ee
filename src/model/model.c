/* Model lifecycle: load (GGUF + tokenizer + hparams + weight views), info, accessors. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "model/model_impl.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

kvs_model_params kvs_model_default_params(void) {
    kvs_model_params p = {0};
    return p;
}

/* A metadata string as it is shown (kvs_model_info, info, the server's
 * model list): invalid UTF-8 and control characters replaced, so a hostile
 * name cannot garble a terminal or make the JSON that carries it invalid. */
static char *dup_display(kvs_gguf_str s) {
    char *c = malloc(3 * s.len + 1);
    if (c) kvs_utf8_display(s.ptr, s.len, c, 3 * s.len + 1);
    return c;
}

int kvs_chat_family_check(const char *family) {
    if (!family || !family[0])
        return kvs_error(KVS_ERR_INVALID_ARG, "chat template family is empty (%s)", KVS_CHAT_FAMILIES);
    if (!kvs_chat_family_named(family))
        return kvs_error(KVS_ERR_INVALID_ARG, "chat template family '%.40s' is not one kvstitch renders (%s)",
                         family, KVS_CHAT_FAMILIES);
    return KVS_OK;
}

static int load(kvs_model *m, const char *path, kvs_model_params params) {
    if (params.chat_template && params.chat_template[0]) { /* ("" = none given: detected) */
        int st = kvs_chat_family_check(params.chat_template);
        if (st) return st;
        m->chat_family = kvs_chat_family_named(params.chat_template);
    }
    int st = kvs_gguf_open(path, &m->gguf);
    if (st) return st;

    kvs_gguf_str s;
    if ((st = kvs_gguf_get_str(m->gguf, "general.architecture", &s)) != KVS_OK && st != KVS_ERR_NOT_FOUND)
        return st; /* present with another type: said so (it had read "missing") */
    if (st == KVS_OK) {
        if (s.len >= sizeof m->arch)
            return kvs_error(KVS_ERR_UNSUPPORTED, "%s: general.architecture is %llu bytes long", path,
                             (unsigned long long)s.len);
        kvs_utf8_display(s.ptr, s.len, m->arch, sizeof m->arch); /* printed in errors and info */
    }
    kvs_gguf_str empty = {"", 0};
    if (kvs_gguf_get_str(m->gguf, "general.name", &s) != KVS_OK) s = empty;
    if (!(m->name = dup_display(s))) return kvs_error(KVS_ERR_NOMEM, "%s: out of memory", path);
    if ((st = kvs_tokenizer_new(m->gguf, &m->tok))) return kvs_error_prefix(st, "%s", path);
    m->eot_id = kvs_tokenizer_eot(m->tok);

    for (int64_t i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
        const kvs_gguf_tensor *t = kvs_gguf_tensor_at(m->gguf, i);
        m->n_params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        m->weight_bytes += t->nbytes;
    }

    m->hp.arch = kvs_arch_find(m->arch);
    m->vocab_only = params.vocab_only || kvs_gguf_n_tensors(m->gguf) == 0;
    if (m->vocab_only) {
        /* Vocabulary files may lack most hparams: take what is there. */
        if (m->arch[0]) kvs_model_read_hparams(m, 0);
        m->hp.n_vocab = kvs_tokenizer_n_vocab(m->tok);
        return KVS_OK;
    }

    if (!m->arch[0]) return kvs_error(KVS_ERR_NOT_FOUND, "%s: key general.architecture is missing", path);
    if (!m->hp.arch) {
        char names[128];
        kvs_arch_names(names, sizeof names);
        return kvs_error(KVS_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (%s)", path, m->arch, names);
    }
    if ((st = kvs_model_read_hparams(m, 1))) return st;
    if (!(m->layers = calloc((size_t)m->hp.n_layer, sizeof *m->layers)))
        return kvs_error(KVS_ERR_NOMEM, "%s: out of memory", path);
    if ((st = kvs_model_bind_weights(m)) || (st = kvs_model_bind_rope_factors(m))) return st;
    int tv = kvs_tokenizer_n_vocab(m->tok);
    if (tv > m->hp.n_vocab)
        return kvs_error(KVS_ERR_FORMAT, "%s: the tokenizer has %d tokens but token_embd.weight only %d rows", path,
                         tv, m->hp.n_vocab);
    /* Padded embeddings: rows past the tokenizer's vocabulary can be neither
     * fed nor printed, so the logits stop at kvs_vocab_size() too. */
    m->hp.n_vocab = tv;
    m->tok_embd.n = tv;
    m->output.n = tv;
    kvs_model_pack_weights(m);
    return KVS_OK;
}

int kvs_model_load(const char *path, kvs_model_params params, kvs_model **out) {
    if (!path || !out) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_model_load: path and out must not be NULL");
    int env = kvs_kernels_check_env(); /* KVS_ISA: before the layouts, which follow the path */
    if (env) return env;
    kvs_model *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return kvs_error(KVS_ERR_NOMEM, "%s: out of memory", path);
    }
    pthread_mutex_init(&m->memo_mu, NULL);
    int st = load(m, path, params);
    if (st) {
        kvs_model_free(m);
        return st;
    }
    *out = m;
    return KVS_OK;
}

void kvs_model_free(kvs_model *m) {
    if (!m) return;
    kvs_tokenizer_free(m->tok);
    kvs_model_unpack_weights(m);
    kvs_gguf_close(m->gguf);
    free(m->layers);
    free(m->layer_hp);
    free(m->rope_factors);
    free(m->vec_copies);
    free(m->name);
    free(m->path);
    pthread_mutex_destroy(&m->memo_mu);
    free(m);
}

void kvs_model_get_info(const kvs_model *m, kvs_model_info *in) { /* NULL model: all zero, as kvs_vocab_size's 0 */
    if (!in) return;
    memset(in, 0, sizeof *in);
    if (!m) return;
    const kvs_hparams *hp = &m->hp;
    in->path = m->path;
    in->name = m->name;
    in->arch = m->arch;
    in->gguf_version = kvs_gguf_version(m->gguf);
    in->n_layer = hp->n_layer;
    in->n_embd = hp->n_embd;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->n_ff = hp->n_ff;
    in->head_dim = hp->head_dim;
    in->n_ctx_train = hp->n_ctx_train;
    in->n_vocab = kvs_tokenizer_n_vocab(m->tok);
    in->rope_freq_base = hp->rope_freq_base;
    in->rope_freq_scale = hp->rope_freq_scale;
    in->rope_dim = hp->rope_dim;
    in->rope_neox = hp->rope_neox;
    in->norm_eps = hp->norm_eps;
    in->tied_output = m->tied_output;
    in->tokenizer_model = kvs_tokenizer_model_name(m->tok);
    in->tokenizer_pre = kvs_tokenizer_pre_name(m->tok);
    if (!in->tokenizer_model) in->tokenizer_model = "";
    if (!in->tokenizer_pre) in->tokenizer_pre = "";
    in->bos_id = kvs_tokenizer_bos(m->tok);
    in->eos_id = kvs_tokenizer_eos(m->tok);
    in->eot_id = m->eot_id;
    in->add_bos = kvs_tokenizer_add_bos(m->tok);
    in->chat_template_family = kvs_model_chat_family(m);
    in->n_params = m->n_params;
    in->weight_bytes = m->weight_bytes;
    in->n_tensors = (int)kvs_gguf_n_tensors(m->gguf);
    in->vocab_only = m->vocab_only;
}

void kvs_model_tensor_type_counts(const kvs_model *m, int counts[KVS_MAX_TENSOR_TYPES]) {
    if (!counts) return;
    memset(counts, 0, sizeof(int) * KVS_MAX_TENSOR_TYPES);
    if (!m) return;
    for (int64_t i = 0; i < kvs_gguf_n_tensors(m->gguf); i++) {
        int t = kvs_gguf_tensor_at(m->gguf, i)->type;
        if (t >= 0 && t < KVS_MAX_TENSOR_TYPES) counts[t]++;
    }
}

const char *kvs_tensor_type_name(int type) {
    const kvs_type_traits *t = kvs_type_traits_of(type);
    return t ? t->name : NULL;
}

const kvs_gguf *kvs_model_gguf(const kvs_model *m) { return m->gguf; }
const kvs_tokenizer *kvs_model_tokenizer(const kvs_model *m) { return m->tok; }
int kvs_model_is_vocab_only(const kvs_model *m) { return m->vocab_only; }
const char *kvs_model_chat_choice(const kvs_model *m) { return m->chat_family; }
const char *kvs_model_chat_family(const kvs_model *m) {
    return m->chat_family ? m->chat_family : kvs_chat_detect_family(m->gguf); /* src/tokenizer/chat.c */
}
const kvs_hparams *kvs_model_hparams(const kvs_model *m) { return &m->hp; }
const kvs_layer_weights *kvs_model_layer(const kvs_model *m, int l) { return &m->layers[l]; }
const kvs_wmat *kvs_model_tok_embd(const kvs_model *m) { return &m->tok_embd; }
const kvs_wmat *kvs_model_output(const kvs_model *m) { return &m->output; }
const float *kvs_model_output_norm(const kvs_model *m) { return m->output_norm; }
const char *kvs_model_path(const kvs_model *m) { return m->path; }
const char *kvs_model_rope_scaling(const kvs_model *m) { return m && m->rope_scaling ? m->rope_scaling : "none"; }

int kvs_model_memo_get(const kvs_model *m, int slot, uint8_t out[32]) {
    if (slot < 0 || slot >= KVS_MODEL_MEMO_N) return 0;
    kvs_model *mm = (kvs_model *)m; /* the memo is the one mutable part */
    pthread_mutex_lock(&mm->memo_mu);
    int set = (mm->memo_set >> slot) & 1u;
    if (set) memcpy(out, mm->memo[slot], 32);
    pthread_mutex_unlock(&mm->memo_mu);
    return set;
}

void kvs_model_memo_set(const kvs_model *m, int slot, const uint8_t v[32]) {
    if (slot < 0 || slot >= KVS_MODEL_MEMO_N) return;
    kvs_model *mm = (kvs_model *)m;
    pthread_mutex_lock(&mm->memo_mu);
    memcpy(mm->memo[slot], v, 32);
    mm->memo_set |= 1u << slot;
    pthread_mutex_unlock(&mm->memo_mu);
}
