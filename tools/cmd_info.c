/* kvstitch info: architecture, hyperparameters, tensor types, vocabulary, chat template. */
#include <string.h>

#include "cli.h"

static const char *usage_text =
    "usage: kvstitch info -m MODEL [--json]\n"
    "  -m, --model PATH   GGUF file\n"
    "  --json             one JSON object instead of text\n";

static void print_text(const kvs_model_info *in, const int *counts) {
    printf("file:            %s\n", in->path);
    printf("gguf version:    %u\n", in->gguf_version);
    printf("name:            %s\n", in->name);
    printf("architecture:    %s%s\n", in->arch, in->vocab_only ? " (vocabulary only)" : "");
    if (!in->vocab_only) {
        printf("layers:          %d\n", in->n_layer);
        printf("embedding:       %d\n", in->n_embd);
        printf("feed-forward:    %d\n", in->n_ff);
        printf("heads:           %d (kv heads %d, head dim %d)\n", in->n_head, in->n_head_kv, in->head_dim);
        printf("context (train): %d\n", in->n_ctx_train);
        printf("rope:            base %g, scale %g, dims %d, %s pairs\n", in->rope_freq_base,
               in->rope_freq_scale, in->rope_dim, in->rope_neox ? "neox" : "adjacent");
        printf("rms norm eps:    %g\n", in->norm_eps);
        printf("output head:     %s\n", in->tied_output ? "tied to token_embd" : "separate");
        printf("parameters:      %lld (%.1f MB of weights)\n", (long long)in->n_params, in->weight_bytes / 1e6);
    }
    printf("tensors:         %d", in->n_tensors);
    const char *sep = " (";
    for (int t = 0; t < KVS_MAX_TENSOR_TYPES; t++) {
        if (!counts[t]) continue;
        const char *name = kvs_tensor_type_name(t);
        printf("%s%s x%d", sep, name ? name : "?", counts[t]);
        sep = ", ";
    }
    printf("%s\n", in->n_tensors ? ")" : "");
    printf("vocabulary:      %d tokens, %s tokenizer, pre-tokenizer '%s'\n", in->n_vocab,
           in->tokenizer_model, in->tokenizer_pre);
    printf("special tokens:  bos %d, eos %d, eot %d, add bos %s\n", in->bos_id, in->eos_id,
           in->eot_id, in->add_bos ? "yes" : "no");
    printf("chat template:   %s\n", in->chat_template_family[0] ? in->chat_template_family : "none recognised");
}

static void json_field_str(const char *key, const char *v, int last) {
    printf("  \"%s\": ", key);
    cli_json_string(stdout, v, strlen(v));
    printf(last ? "\n" : ",\n");
}

static void print_json(const kvs_model_info *in, const int *counts) {
    printf("{\n");
    json_field_str("file", in->path, 0);
    json_field_str("name", in->name, 0);
    json_field_str("architecture", in->arch, 0);
    printf("  \"gguf_version\": %u,\n  \"vocab_only\": %s,\n", in->gguf_version, in->vocab_only ? "true" : "false");
    printf("  \"n_layer\": %d,\n  \"n_embd\": %d,\n  \"n_ff\": %d,\n  \"n_head\": %d,\n  \"n_head_kv\": %d,\n"
           "  \"head_dim\": %d,\n  \"n_ctx_train\": %d,\n  \"rope_freq_base\": %g,\n  \"rope_freq_scale\": %g,\n"
           "  \"rope_dim\": %d,\n  \"rope_neox\": %s,\n  \"norm_eps\": %g,\n  \"tied_output\": %s,\n"
           "  \"n_params\": %lld,\n  \"weight_bytes\": %llu,\n  \"n_tensors\": %d,\n",
           in->n_layer, in->n_embd, in->n_ff, in->n_head, in->n_head_kv, in->head_dim, in->n_ctx_train,
           in->rope_freq_base, in->rope_freq_scale, in->rope_dim, in->rope_neox ? "true" : "false",
           in->norm_eps, in->tied_output ? "true" : "false", (long long)in->n_params,
           (unsigned long long)in->weight_bytes, in->n_tensors);
    printf("  \"tensor_types\": {");
    const char *sep = "";
    for (int t = 0; t < KVS_MAX_TENSOR_TYPES; t++) {
        if (!counts[t]) continue;
        const char *name = kvs_tensor_type_name(t);
        printf("%s\"%s\": %d", sep, name ? name : "?", counts[t]);
        sep = ", ";
    }
    printf("},\n  \"n_vocab\": %d,\n", in->n_vocab);
    json_field_str("tokenizer_model", in->tokenizer_model, 0);
    json_field_str("tokenizer_pre", in->tokenizer_pre, 0);
    printf("  \"bos_id\": %d,\n  \"eos_id\": %d,\n  \"eot_id\": %d,\n  \"add_bos\": %s,\n", in->bos_id,
           in->eos_id, in->eot_id, in->add_bos ? "true" : "false");
    json_field_str("chat_template_family", in->chat_template_family, 1);
    printf("}\n");
}

int cmd_info(int argc, char **argv) {
    const char *model_path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model_path = argv[++i];
        else if (!strcmp(a, "--json")) json = 1;
        else return cli_usage_error("info", "unknown option or missing value: %s", a);
    }
    if (!model_path) return cli_usage_error("info", "-m MODEL is required");
    kvs_model *model = NULL;
    int st = kvs_model_load(model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) return cli_fail(st, model_path);
    kvs_model_info info;
    int counts[KVS_MAX_TENSOR_TYPES];
    kvs_model_get_info(model, &info);
    kvs_model_tensor_type_counts(model, counts);
    if (json) print_json(&info, counts);
    else print_text(&info, counts);
    kvs_model_free(model);
    return 0;
}
