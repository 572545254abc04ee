/* kvstitch --version: the library version, the build's git describe, the CPU's kernel paths. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifndef KVS_GIT_DESCRIBE
#define KVS_GIT_DESCRIBE "unknown"
#endif

/* No options and no arguments: a stray one is a usage error (it had been
 * ignored, exit 0); --help prints the usage. */
static const cli_command k_cmd = {"version",
                                  "usage: kvstitch version   (or kvstitch --version)\n"
                                  "prints the library version, the build's git describe and the CPU's kernel paths\n",
                                  NULL, 0, NULL, NULL};

int cmd_version(int argc, char **argv) {
    int rc = cli_parse(&k_cmd, argc, argv, NULL, NULL);
    if (rc >= 0) return rc;
#if defined(KVS_VERSION_MAJOR) && defined(KVS_VERSION_MINOR) && defined(KVS_VERSION_PATCH)
    printf("kvstitch %d.%d.%d (git %s)\n", KVS_VERSION_MAJOR, KVS_VERSION_MINOR, KVS_VERSION_PATCH, KVS_GIT_DESCRIBE);
#else
    printf("kvstitch (library version not set) (git %s)\n", KVS_GIT_DESCRIBE);
#endif
    printf("kernel paths on this CPU: %s\n", kvs_isa_paths());
    const char *isa = kvs_isa_in_use(), *env = getenv("KVS_ISA");
    if (*isa) printf("kernel path in use: %s%s\n", isa, env && *env ? " (KVS_ISA)" : "");
    else printf("kernel path in use: none: %s\n", kvs_last_error());
    return 0;
}
