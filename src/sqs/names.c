/* names.c - how the SQS endpoint names things (docs/sqs.md "Queues",
 * "Messages"): queue URLs and ARNs, MessageIds, receipt handles, and the
 * cursor a ListQueues prefix starts after. */
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "retryd/sqs/face.h"

void rd_sqs_queue_url(const rd_sqs_t *sqs, const char *name, size_t len, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s/%.*s", sqs->origin, sqs->account, (int)len, name);
}

void rd_sqs_queue_arn(const rd_sqs_t *sqs, const char *name, size_t len, char *out, size_t cap)
{
    snprintf(out, cap, "arn:aws:sqs:%s:%s:%.*s", sqs->region, sqs->account, (int)len, name);
}

/* A URL's path is "/<account>/<name>": the host is not checked (clients
 * reach the endpoint under any name: localhost, a container's, a proxy's). */
const char *rd_sqs_name_of_url(const rd_sqs_t *sqs, const char *s, size_t *len)
{
    const char *path = s;
    const char *scheme = strstr(s, "://");
    if (scheme) {
        path = strchr(scheme + 3, '/');
        if (path == NULL) return NULL;
    }
    if (*path != '/') return NULL;
    path++;
    size_t alen = strlen(sqs->account);
    if (strncmp(path, sqs->account, alen) != 0 || path[alen] != '/') return NULL;
    const char *name = path + alen + 1;
    size_t n = strcspn(name, "/?#");
    if (n == 0 || name[n] != '\0') return NULL;
    *len = n;
    return name;
}

const char *rd_sqs_name_of_arn(const rd_sqs_t *sqs, const char *s, size_t *len)
{
    char prefix[96];
    int n = snprintf(prefix, sizeof prefix, "arn:aws:sqs:%s:%s:", sqs->region, sqs->account);
    if (n < 0 || strncmp(s, prefix, (size_t)n) != 0) return NULL;
    *len = strlen(s + n);
    return *len ? s + n : NULL;
}

bool rd_sqs_queue_name_ok(const char *name, size_t len)
{
    if (len == 0 || len > RD_SQS_QUEUE_NAME_MAX) return false;
    size_t base = len;
    if (len > 5 && memcmp(name + len - 5, ".fifo", 5) == 0) base = len - 5;
    for (size_t i = 0; i < base; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

/* FNV-1a of the queue name: MessageIds of two queues differ in their first
 * group, and one message's is the same at every answer; a receipt handle
 * starts with it too. */
static unsigned queue_tag(const char *queue, size_t queue_len)
{
    unsigned h = 2166136261u;
    for (size_t i = 0; i < queue_len; i++) h = (h ^ (unsigned char)queue[i]) * 16777619u;
    return h;
}

void rd_sqs_message_id(const char *queue, size_t queue_len, long long id, char out[37])
{
    static const char digits[] = "0123456789abcdef";
    unsigned h = queue_tag(queue, queue_len);
    unsigned long long u = (unsigned long long)id;
    /* hhhhhhhh-000u-4uuu-8000-uuuuuuuuuuuu: the hash, then the id's 64 bits
     * (4 in the second group, 12 in the third, 48 in the last). */
    char *p = out;
    for (int i = 7; i >= 0; i--) *p++ = digits[(h >> (4 * i)) & 15];
    memcpy(p, "-000", 4);
    p += 4;
    *p++ = digits[(u >> 60) & 15];
    *p++ = '-';
    *p++ = '4';
    for (int i = 2; i >= 0; i--) *p++ = digits[(u >> (48 + 4 * i)) & 15];
    memcpy(p, "-8000-", 6);
    p += 6;
    for (int i = 11; i >= 0; i--) *p++ = digits[(u >> (4 * i)) & 15];
    *p = '\0';
}

void rd_sqs_handle_encode(const char *queue, size_t queue_len, long long id, const char *token,
                          size_t token_len, rd_buf_t *out)
{
    char raw[256];
    int n = snprintf(raw, sizeof raw, "%08x:%lld:%.*s", queue_tag(queue, queue_len), id,
                     (int)token_len, token);
    if (n < 0 || (size_t)n >= sizeof raw) n = 0;
    unsigned char enc[4 * ((sizeof raw + 2) / 3) + 1];
    int m = EVP_EncodeBlock(enc, (const unsigned char *)raw, n);
    rd_buf_append(out, (const char *)enc, (size_t)m);
}

bool rd_sqs_handle_decode(const char *handle, const char *queue, size_t queue_len, long long *id,
                          char *token, size_t token_cap)
{
    size_t len = strlen(handle);
    if (len == 0 || len % 4 != 0 || len > 340) return false;
    unsigned char raw[256];
    int n = EVP_DecodeBlock(raw, (const unsigned char *)handle, (int)len);
    if (n <= 0) return false;
    /* EVP_DecodeBlock counts the padding's bytes as zeros. */
    if (handle[len - 1] == '=') n--;
    if (handle[len - 2] == '=') n--;
    /* Another queue's handle is not this queue's: its id could name another
     * message here, and a delete must not answer success for nothing. */
    char tag[10];
    snprintf(tag, sizeof tag, "%08x:", queue_tag(queue, queue_len));
    if (n < 9 || memcmp(raw, tag, 9) != 0) return false;
    memmove(raw, raw + 9, (size_t)(n - 9));
    n -= 9;
    long long v = 0;
    int i = 0;
    for (; i < n && raw[i] >= '0' && raw[i] <= '9' && i < 19; i++) v = v * 10 + (raw[i] - '0');
    if (i == 0 || i >= n || raw[i] != ':' || v <= 0) return false;
    size_t tlen = (size_t)(n - i - 1);
    if (tlen == 0 || tlen >= token_cap) return false;
    for (size_t j = 0; j < tlen; j++)
        if (raw[i + 1 + j] < 0x21 || raw[i + 1 + j] > 0x7e) return false;
    memcpy(token, raw + i + 1, tlen);
    token[tlen] = '\0';
    *id = v;
    return true;
}

/* Queue names are at most 255 bytes, so prefix[..len-1] with its last byte
 * one lower and then 0xff bytes up to 255 is below every name that starts
 * with prefix and above every name below them. */
size_t rd_sqs_cursor_before(const char *prefix, size_t len, char *out)
{
    memcpy(out, prefix, len);
    unsigned char last = (unsigned char)out[len - 1];
    if (last == 0) return len - 1;
    out[len - 1] = (char)(last - 1);
    size_t n = len;
    while (n < 255) out[n++] = (char)0xff;
    return n;
}
