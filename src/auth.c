/* auth.c - the single bearer token of --auth-token-file, read from its file
 * (checked as an admin token of the set: tokens.c). */
#include "retryd/auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "retryd/alloc.h"

enum { TOKEN_MAX = 4096 };

char *rd_auth_load_token(const char *path, char *err, size_t err_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(err, err_len, "cannot open the auth token file %s: %s", path, strerror(errno));
        return NULL;
    }
    char line[TOKEN_MAX + 2];
    size_t n = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[n] = '\0';
    char *start = line;
    while (*start && isspace((unsigned char)*start)) start++;
    char *end = start;
    while (*end && *end != '\n' && *end != '\r') end++;
    while (end > start && isspace((unsigned char)end[-1])) end--;
    size_t len = (size_t)(end - start);
    if (len == 0 || len > TOKEN_MAX) {
        snprintf(err, err_len, "the auth token file %s must hold a token of 1 to %d bytes", path,
                 TOKEN_MAX);
        return NULL;
    }
    return rd_strndup(start, len);
}
