/* auth.h - the bearer token of --auth-token-file, which the API takes as one
 * admin token beside --token-file's (tokens.h). The token is never logged. */
#ifndef RETRYD_AUTH_H
#define RETRYD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* Reads the token from path: the file's first line without surrounding
 * whitespace, 1-4096 bytes. Returns a token to free with rd_free, or NULL with
 * the reason in err (never the file's content). */
char *rd_auth_load_token(const char *path, char *err, size_t err_len);

#endif
