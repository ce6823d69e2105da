/* auth.h - the bearer token that guards every route but /healthz when
 * --auth-token-file is set. The token is never logged. */
#ifndef RETRYD_AUTH_H
#define RETRYD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* Reads the token from path: the file's first line without surrounding
 * whitespace, 1-4096 bytes. Returns a token to free with rd_free, or NULL with
 * the reason in err (never the file's content). */
char *rd_auth_load_token(const char *path, char *err, size_t err_len);

/* True when header is "Bearer <token>" (scheme case-insensitive) and the
 * token matches; compared in constant time for a given token length. */
bool rd_auth_check(const char *token, const char *header);

#endif
