/* GET /: the chat page. server/page.html is turned into C string literals
 * at build time (the Makefile's page_html.h rule): one file to edit, no
 * build step for the page itself, nothing fetched by the browser. */
#include <string.h>

#include "server.h"

static const char page_html[] =
#include "page_html.h"
    ;

int srv_page(srv_server *s, struct MHD_Connection *c, const char *arg, const char *body, size_t len) {
    return srv_reply(c, 200, "text/html; charset=utf-8", page_html, sizeof page_html - 1);
}
