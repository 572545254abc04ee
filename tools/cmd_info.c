/* kvstitch info: architecture, hyperparameters, tensor types, vocabulary, chat template. */
#include <string.h>

#include "cli.h"
#include "json_util.h"

static void print_text(const kvs_model_info *in, const int *counts, const char *rope_scaling) {
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
        printf("rope scaling:    %s\n", rope_scaling);
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

typedef struct info_opts {
    const char *model_path;
    int json;
} info_opts;

static const cli_opt k_opts[] = {
    CLI_FILE_OPT("-m", "--model", info_opts, model_path, "PATH", "GGUF file"),
    CLI_FLAG_OPT(NULL, "--json", info_opts, json, 1, "one JSON object instead of text"),
};
static const cli_command k_cmd = {"info", "usage: kvstitch info -m MODEL [--json]\n", k_opts,
                                  (int)(sizeof k_opts / sizeof k_opts[0]), NULL, NULL};

int cmd_info(int argc, char **argv) {
    info_opts o = {0};
    int rc = cli_parse(&k_cmd, argc, argv, &o, NULL);
    if (rc >= 0) return rc;
    if (!o.model_path) return cli_usage_error("info", "-m MODEL is required");
    const char *model_path = o.model_path;
    kvs_model *model = NULL;
    int st = kvs_model_load(model_path, kvs_model_default_params(), &model);
    if (st != KVS_OK) return cli_fail(st, model_path);
    kvs_model_info info;
    int counts[KVS_MAX_TENSOR_TYPES];
    kvs_model_get_info(model, &info);
    kvs_model_tensor_type_counts(model, counts);
    rc = 0;
    const char *rope_scaling = kvs_model_rope_scaling(model);
    if (o.json) {
        cJSON *j = json_model_info(&info, counts);
        if (j) cJSON_AddStringToObject(j, "rope_scaling", rope_scaling);
        rc = json_print_line(stdout, j) ? 1 : 0;
    } else {
        print_text(&info, counts, rope_scaling);
    }
    kvs_model_free(model);
    return rc;
}
