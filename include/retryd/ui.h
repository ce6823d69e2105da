/* ui.h - the dead-letter web console's static files, compiled into the
 * binary from ui/ by scripts/embed_ui.sh. The console is plain HTML, CSS and
 * JavaScript that drives the same HTTP API as any client. */
#ifndef RETRYD_UI_H
#define RETRYD_UI_H

#include <stddef.h>

typedef struct rd_ui_asset {
    const char *path;           /* "/ui/index.html" */
    const char *content_type;
    const char *data;
    size_t len;
} rd_ui_asset_t;

/* Terminated by an entry whose path is NULL. */
extern const rd_ui_asset_t rd_ui_assets[];

/* The asset served at path ("/ui/" is index.html), or NULL. */
const rd_ui_asset_t *rd_ui_find(const char *path, size_t len);

/* Headers every console response carries: a Content-Security-Policy that
 * allows no inline script and no other origin, nosniff, no framing. */
extern const char rd_ui_headers[];

#endif
