/* kvstitch tokenize: print the token ids of a text, space-separated on one line. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *usage_text =
    "usage: kvstitch tokenize -m MODEL [--no-bos] [--no-special] (-f FILE | TEXT)\n"
    "  -m, --model PATH   GGUF file (a vocabulary-only GGUF is enough)\n"
    "  -f, --file PATH    read the text from a file instead of the argument\n"
    "  --no-bos           never add the BOS token (default: add it if the model asks for it)\n"
    "  --no-special       treat control-token text like <|im_start|> as plain text\n";

int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *file = NULL, *text = NULL;
    int add_bos = 1, special = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage_text, stdout); return 0; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model_path = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && i + 1 < argc) file = argv[++i];
        else if (!strcmp(a, "--no-bos")) add_bos = 0;
        else if (!strcmp(a, "--no-special")) special = 0;
        else if (a[0] == '-' && a[1] && !text) return cli_usage_error("tokenize", "unknown option or missing value: %s", a);
        else if (!text) text = a;
        else return cli_usage_error("tokenize", "more than one TEXT argument");
    }
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
    int rc = 1;
    if (ids) {
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        rc = 0;
    }
    free(ids);
    free(owned);
    kvs_model_free(model);
    return rc;
}
