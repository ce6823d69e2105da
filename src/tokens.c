/* tokens.c - the token set of --token-file and --auth-token-file: loading,
 * roles, queue patterns and the constant-time lookup (docs/security.md
 * "Tokens"). */
#include "retryd/tokens.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "retryd/alloc.h"

enum {
    TOKEN_MAX = 4096,
    PATTERN_MAX = 255,
    LINE_MAX_BYTES = 8192,
    QUEUE_NAME_MAX = 1024,   /* longer names match no pattern */
    DIGEST_LEN = 32,         /* SHA-256 */
};

static const struct {
    const char *name;
    unsigned role;
} roles[] = {
    { "producer", RD_ROLE_PRODUCER }, { "worker", RD_ROLE_WORKER },
    { "reader", RD_ROLE_READER },     { "operator", RD_ROLE_OPERATOR },
    { "admin", RD_ROLE_ADMIN },
};

bool rd_roles_grant(unsigned have, unsigned need)
{
    if (need == RD_ROLE_ANY || (have & RD_ROLE_ADMIN) || (have & need)) return true;
    return need == RD_ROLE_READER && (have & RD_ROLE_OPERATOR);
}

const char *rd_role_name(unsigned role)
{
    for (size_t i = 0; i < sizeof roles / sizeof roles[0]; i++)
        if (roles[i].role == role) return roles[i].name;
    return "any";
}

bool rd_roles_parse(const char *s, size_t len, unsigned *mask)
{
    *mask = 0;
    size_t start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && s[i] != ',') continue;
        size_t n = i - start;
        bool known = false;
        for (size_t r = 0; r < sizeof roles / sizeof roles[0] && !known; r++) {
            if (strlen(roles[r].name) == n && memcmp(roles[r].name, s + start, n) == 0) {
                *mask |= roles[r].role;
                known = true;
            }
        }
        if (!known) return false;
        start = i + 1;
    }
    return true;
}

struct rd_token {
    unsigned char digest[DIGEST_LEN];
    unsigned roles;
    char **patterns;
    size_t pattern_count;
};

struct rd_tokens {
    rd_token_t *tokens;
    size_t count;
    int refs;
};

static void digest_of(const char *s, size_t len, unsigned char out[DIGEST_LEN])
{
    unsigned int n = DIGEST_LEN;
    EVP_Digest(s, len, out, &n, EVP_sha256(), NULL);
}

rd_tokens_t *rd_tokens_new(void)
{
    rd_tokens_t *set = rd_calloc(1, sizeof *set);
    set->refs = 1;
    return set;
}

static void set_free(rd_tokens_t *set)
{
    for (size_t i = 0; i < set->count; i++) {
        for (size_t p = 0; p < set->tokens[i].pattern_count; p++)
            rd_free(set->tokens[i].patterns[p]);
        rd_free(set->tokens[i].patterns);
    }
    rd_free(set->tokens);
    rd_free(set);
}

rd_tokens_t *rd_tokens_ref(rd_tokens_t *set)
{
    if (set) set->refs++;
    return set;
}

void rd_tokens_unref(rd_tokens_t *set)
{
    if (set && --set->refs == 0) set_free(set);
}

size_t rd_tokens_count(const rd_tokens_t *set)
{
    return set ? set->count : 0;
}

void rd_tokens_add_first(rd_tokens_t *set, const char *token, size_t len, unsigned roles_mask)
{
    set->tokens = rd_realloc(set->tokens, (set->count + 1) * sizeof *set->tokens);
    memmove(set->tokens + 1, set->tokens, set->count * sizeof *set->tokens);
    set->count++;
    memset(&set->tokens[0], 0, sizeof set->tokens[0]);
    digest_of(token, len, set->tokens[0].digest);
    set->tokens[0].roles = roles_mask;
}

static bool visible(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f) return false;
    return true;
}

/* One non-blank, non-comment line, split in place. The messages name the
 * line and the field, never its text: a line with its columns swapped would
 * otherwise print the token. */
static bool add_line(rd_tokens_t *set, char *line, unsigned lineno, char *why, size_t why_len)
{
    char *save = NULL;
    char *token = strtok_r(line, " \t", &save);
    char *role_list = strtok_r(NULL, " \t", &save);
    if (role_list == NULL) {
        snprintf(why, why_len, "line %u: a token needs its roles after it ('TOKEN ROLES "
                 "[queue-pattern ...]')", lineno);
        return false;
    }
    size_t len = strlen(token);
    if (len > TOKEN_MAX || !visible(token)) {
        snprintf(why, why_len, "line %u: a token must be 1-%d visible ASCII characters", lineno,
                 TOKEN_MAX);
        return false;
    }
    rd_token_t t = { .roles = 0 };
    if (!rd_roles_parse(role_list, strlen(role_list), &t.roles)) {
        snprintf(why, why_len, "line %u: unknown role in the roles field (a comma list of "
                 "producer, worker, reader, operator, admin)", lineno);
        return false;
    }
    digest_of(token, len, t.digest);
    OPENSSL_cleanse(token, len);
    for (size_t i = 0; i < set->count; i++) {
        if (CRYPTO_memcmp(set->tokens[i].digest, t.digest, DIGEST_LEN) == 0) {
            snprintf(why, why_len, "line %u: the same token is on an earlier line", lineno);
            return false;
        }
    }
    for (char *p = strtok_r(NULL, " \t", &save); p; p = strtok_r(NULL, " \t", &save)) {
        if (strlen(p) > PATTERN_MAX || !visible(p)) {
            snprintf(why, why_len, "line %u: a queue pattern must be 1-%d visible ASCII "
                     "characters", lineno, PATTERN_MAX);
            for (size_t i = 0; i < t.pattern_count; i++) rd_free(t.patterns[i]);
            rd_free(t.patterns);
            return false;
        }
        t.patterns = rd_realloc(t.patterns, (t.pattern_count + 1) * sizeof *t.patterns);
        t.patterns[t.pattern_count++] = rd_strdup(p);
    }
    set->tokens = rd_realloc(set->tokens, (set->count + 1) * sizeof *set->tokens);
    set->tokens[set->count++] = t;
    return true;
}

rd_tokens_t *rd_tokens_load(const char *path, char *why, size_t why_len)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        snprintf(why, why_len, "cannot open the token file %s: %s", path, strerror(errno));
        return NULL;
    }
    rd_tokens_t *set = rd_tokens_new();
    char line[LINE_MAX_BYTES + 2];
    unsigned lineno = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t n = strlen(line);
        if (n > 0 && line[n - 1] == '\n') {
            line[--n] = '\0';
        } else if (!feof(f)) {
            snprintf(why, why_len, "line %u: longer than %d bytes", lineno, LINE_MAX_BYTES);
            ok = false;
            break;
        }
        if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
        const char *p = line + strspn(line, " \t");
        if (*p == '\0' || *p == '#') continue;
        ok = add_line(set, line, lineno, why, why_len);
    }
    if (ok && ferror(f)) {
        snprintf(why, why_len, "cannot read the token file %s: %s", path, strerror(errno));
        ok = false;
    }
    fclose(f);
    OPENSSL_cleanse(line, sizeof line);
    if (ok && set->count == 0) {
        snprintf(why, why_len, "the token file %s holds no token", path);
        ok = false;
    }
    if (!ok) {
        if (strncmp(why, "line ", 5) == 0) {
            /* Name the file too: "the token file F, line 3: ..." */
            char tail[512];
            snprintf(tail, sizeof tail, "%s", why);
            snprintf(why, why_len, "the token file %s, %s", path, tail);
        }
        rd_tokens_unref(set);
        return NULL;
    }
    return set;
}

const rd_token_t *rd_tokens_find(const rd_tokens_t *set, const char *authorization)
{
    if (set == NULL || authorization == NULL || strncasecmp(authorization, "Bearer ", 7) != 0)
        return NULL;
    const char *given = authorization + 7;
    while (*given == ' ') given++;
    size_t len = strlen(given);
    while (len > 0 && (given[len - 1] == ' ' || given[len - 1] == '\t')) len--;
    unsigned char d[DIGEST_LEN];
    digest_of(given, len, d);
    /* Every digest is compared, whichever matches: the time is the same for
     * every token presented. */
    size_t found = set->count;
    for (size_t i = 0; i < set->count; i++) {
        int differs = CRYPTO_memcmp(d, set->tokens[i].digest, DIGEST_LEN);
        if (differs == 0 && found == set->count) found = i;
    }
    return found < set->count ? &set->tokens[found] : NULL;
}

unsigned rd_token_roles(const rd_token_t *t)
{
    return t->roles;
}

size_t rd_token_pattern_count(const rd_token_t *t)
{
    return t->pattern_count;
}

const char *rd_token_pattern(const rd_token_t *t, size_t i)
{
    return t->patterns[i];
}

bool rd_token_all_queues(const rd_token_t *t)
{
    return t->pattern_count == 0;
}

bool rd_token_allows_queue(const rd_token_t *t, const char *name, size_t len)
{
    if (t->pattern_count == 0) return true;
    if (len > QUEUE_NAME_MAX || memchr(name, '\0', len) != NULL) return false;
    char buf[QUEUE_NAME_MAX + 1];
    memcpy(buf, name, len);
    buf[len] = '\0';
    for (size_t i = 0; i < t->pattern_count; i++)
        if (fnmatch(t->patterns[i], buf, 0) == 0) return true;
    return false;
}
