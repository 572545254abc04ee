/* The public tokenizer, detokenizer and chat-template API (kvstitch.h):
 * thin wrappers that reach the tokenizer and the GGUF through the model. */
#include "base/error.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

int kvs_tokenize(const kvs_model *model, const char *text, size_t len, int flags, int32_t *out, int cap,
                 int *n_out) {
    if (!model) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_tokenize: NULL model");
    return kvs_tokenizer_encode(kvs_model_tokenizer(model), text, len, flags, out, cap, n_out);
}

int kvs_vocab_size(const kvs_model *model) {
    return model ? kvs_tokenizer_n_vocab(kvs_model_tokenizer(model)) : 0;
}

int kvs_token_to_bytes(const kvs_model *model, int32_t token, int render_special, char *buf, size_t cap,
                       size_t *n_out) {
    if (!model) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_token_to_bytes: NULL model");
    return kvs_tokenizer_token_bytes(kvs_model_tokenizer(model), token, render_special, buf, cap, n_out);
}

int kvs_token_is_eog(const kvs_model *model, int32_t token) {
    return model ? kvs_tokenizer_is_eog(kvs_model_tokenizer(model), token) : 0;
}

int kvs_detok_new(const kvs_model *model, int render_special, kvs_detok **out) {
    if (!model) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_detok_new: NULL model");
    return kvs_detok_new_tok(kvs_model_tokenizer(model), render_special, out);
}

int kvs_chat_render(const kvs_model *model, const char *family, const kvs_chat_message *msgs, int n_msgs,
                    int add_generation_prompt, char **out) {
    if (!model) return kvs_error(KVS_ERR_INVALID_ARG, "kvs_chat_render: NULL model");
    if (!family) family = kvs_model_chat_choice(model); /* the load's, else NULL: detect */
    return kvs_chat_render_gguf(kvs_model_gguf(model), family, msgs, n_msgs, add_generation_prompt, out);
}
