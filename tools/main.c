/* kvstitch CLI entry point: dispatches to one file per command. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

int cmd_serve(int argc, char **argv); /* server/serve.c */

static const command commands[] = {
    {"generate", cmd_generate, "generate text from a prompt"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"info", cmd_info, "print a model's architecture, tensors and vocabulary"},
    {"bench", cmd_bench, "measure prefill and decode tokens/s"},
    {"perplexity", cmd_perplexity, "perplexity of a model over a text file"},
    {"warm", cmd_warm, "cache the prompt KV of texts without generating"},
    {"cache", cmd_cache, "inspect (stats, ls), empty (clear) or bound (prune) a chunk cache: directory or Redis"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server sharing one chunk KV cache"},
    {"version", cmd_version, "library version, git describe, ISA paths (also --version)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kvstitch COMMAND [options]   (kvstitch COMMAND --help for details)\n"
               "       kvstitch --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
}

/* The command's status, or 1 when its output did not all reach stdout (a
 * full disk, a closed pipe's EPIPE): every command had exited 0 whatever
 * became of what it printed. */
static int with_stdout_checked(int rc) {
    if (fflush(stdout) == 0 && !ferror(stdout)) return rc;
    fprintf(stderr, "kvstitch: cannot write the output: %s\n", strerror(errno));
    return rc ? rc : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return with_stdout_checked(0); /* (a help to /dev/full had exited 0) */
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))
        return with_stdout_checked(cmd_version(argc - 1, argv + 1));
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return with_stdout_checked(commands[i].run(argc - 1, argv + 1));
    fprintf(stderr, "kvstitch: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
