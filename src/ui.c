/* ui.c - looking up the web console's embedded files. */
#include "retryd/ui.h"

#include <string.h>

const char rd_ui_headers[] =
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "X-Frame-Options: DENY\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Cache-Control: no-cache\r\n";

const rd_ui_asset_t *rd_ui_find(const char *path, size_t len)
{
    if (len == 4 && memcmp(path, "/ui/", 4) == 0) {
        path = "/ui/index.html";
        len = strlen(path);
    }
    for (const rd_ui_asset_t *a = rd_ui_assets; a->path; a++)
        if (strlen(a->path) == len && memcmp(a->path, path, len) == 0) return a;
    return NULL;
}
