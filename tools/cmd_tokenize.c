/* kvstitch tokenize: print the token ids of a text, space-separated on one line. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_util.h"

typedef struct tok_opts {
    const char *model_path, *file, *text;
    int no_bos, no_special, pieces;
} tok_opts;

static int set_text(void *opts, const char *arg) {
    tok_opts *o = opts;
    if (o->text) return cli_usage_error("tokenize", "more than one TEXT argument ('%s' and '%s')", o->text, arg);
    o->text = arg;
    return 0;
}

static const cli_opt k_opts[] = {
    CLI_FILE_OPT("-m", "--model", tok_opts, model_path, "PATH", "GGUF file (a vocabulary-only GGUF is enough)"),
    CLI_FILE_OPT("-f", "--file", tok_opts, file, "PATH",
                 "read the text from a file instead of the argument (a NUL byte in it is an error)"),
    CLI_FLAG_OPT(NULL, "--no-bos", tok_opts, no_bos, 1, "never add the BOS token (default: add it if the model asks for it)"),
    CLI_FLAG_OPT(NULL, "--no-special", tok_opts, no_special, 1, "treat control-token text like <|im_start|> as plain text"),
    CLI_FLAG_OPT(NULL, "--pieces", tok_opts, pieces, 1,
                 "one token a line: its id, a tab and its text as a JSON string"),
};
static const cli_command k_cmd = {"tokenize", "usage: kvstitch tokenize -m MODEL [options] (-f FILE | TEXT)\n", k_opts,
                                  (int)(sizeof k_opts / sizeof k_opts[0]), NULL, set_text};

/* --pieces: "id<TAB>"text"" per token, the text a JSON string literal
 * (control tokens rendered; a token holding part of a UTF-8 character is
 * spelled "bytes:\xNN..." as the server's logprobs spell it: its raw bytes
 * had made the line invalid JSON). */
static void print_pieces(const kvs_model *model, const int32_t *ids, int n) {
    char buf[256];
    for (int i = 0; i < n; i++) {
        size_t len = 0;
        int st = kvs_token_to_bytes(model, ids[i], 1, buf, sizeof buf, &len);
        if (st == KVS_ERR_BUFFER_TOO_SMALL) len = sizeof buf;
        else if (st != KVS_OK) len = 0;
        printf("%d\t", ids[i]);
        char *t = json_token_spelling(buf, len);
        cli_json_string(stdout, t ? t : "", t ? strlen(t) : 0);
        free(t);
        putchar('\n');
    }
}

int cmd_tokenize(int argc, char **argv) {
    tok_opts o = {0};
    int rc = cli_parse(&k_cmd, argc, argv, &o, NULL);
    if (rc >= 0) return rc;
    const char *model_path = o.model_path, *file = o.file, *text = o.text;
    int add_bos = !o.no_bos, special = !o.no_special;
    if (!model_path) return cli_usage_error("tokenize", "-m MODEL is required");
    if (!file == !text) return cli_usage_error("tokenize", "give exactly one of -f FILE or TEXT");

    size_t len = 0;
    char *owned = NULL;
    if (file) {
        if (!(owned = cli_read_file(file, &len))) return 1;
        text = owned;
    } else {
        len = strlen(text);
    }

    kvs_model_params mp = kvs_model_default_params();
    mp.vocab_only = 1;
    kvs_model *model = NULL;
    int st = kvs_model_load(model_path, mp, &model);
    if (st != KVS_OK) { free(owned); return cli_fail(st, model_path); }

    kvs_model_info info;
    kvs_model_get_info(model, &info);
    int flags = (special ? KVS_TOKENIZE_PARSE_SPECIAL : 0) | (add_bos && info.add_bos ? KVS_TOKENIZE_ADD_BOS : 0);
    int n = 0;
    int32_t *ids = cli_tokenize(model, text, len, flags, &n);
    rc = 1;
    if (ids && o.pieces) {
        print_pieces(model, ids, n);
        rc = 0;
    } else if (ids) {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        rc = 0;
    }
    free(ids);
    free(owned);
    kvs_model_free(model);
    return rc;
}
