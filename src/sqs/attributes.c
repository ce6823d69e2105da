/* sqs/attributes.c - message attributes packed as MD5OfMessageAttributes
 * digests them, and SQS's character rules (docs/sqs.md "Messages").
 *
 * The digest is the one the AWS SDKs verify (aws-sdk-java's
 * MessageMD5ChecksumHandler; the SQS developer guide's "Calculating the MD5
 * message digest for message attributes"): attributes sorted by name, each as
 * length-prefixed name and DataType, a transport byte and the length-prefixed
 * value, lengths 4 bytes big-endian. The packed blob is exactly that byte
 * string, so its MD5 is the digest. */
#include "retryd/sqs/attributes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "retryd/alloc.h"
#include "retryd/utf8.h"

enum {
    NAME_MAX_BYTES = 256,   /* SQS: a name of up to 256 characters */
    TYPE_MAX_BYTES = 256,   /* SQS: a DataType of up to 256 characters */
    TRANSPORT_STRING = 1,   /* String and Number values */
    TRANSPORT_BINARY = 2,
    NUMBER_MAX_DIGITS = 38, /* SQS: up to 38 digits of precision ... */
    NUMBER_MIN_EXP = -128,  /* ... between 10^-128 and 10^+126 */
    NUMBER_MAX_EXP = 126,
};

void rd_sqs_md5_hex(const void *data, size_t len, char out[33])
{
    static const char digits[] = "0123456789abcdef";
    /* The digest is fetched and its context made once (the loop is one
     * thread): EVP_Digest would fetch and allocate at every call, about
     * half of a send's MD5 cost (docs/benchmarks.md, "SQS endpoint"). */
    static EVP_MD *md5;
    static EVP_MD_CTX *ctx;
    if (md5 == NULL && (md5 = EVP_MD_fetch(NULL, "MD5", NULL)) == NULL) abort();
    if (ctx == NULL && (ctx = EVP_MD_CTX_new()) == NULL) abort();
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (EVP_DigestInit_ex(ctx, md5, NULL) != 1 || EVP_DigestUpdate(ctx, data, len) != 1 ||
        EVP_DigestFinal_ex(ctx, md, &md_len) != 1 || md_len != 16)
        abort();
    for (unsigned i = 0; i < 16; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[32] = '\0';
}

bool rd_sqs_body_chars_ok(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        unsigned cp;
        size_t n = rd_utf8_sequence(u + i, len - i, &cp);
        if (n == 0) return false;
        /* rd_utf8_sequence already refuses surrogates and past U+10FFFF. */
        if (cp < 0x20 && cp != 0x9 && cp != 0xA && cp != 0xD) return false;
        if (cp == 0xFFFE || cp == 0xFFFF) return false;
        i += n;
    }
    return true;
}

/* ---------------------------------------------------------------------------
 * Base64 (OpenSSL), strict: only the alphabet, length a multiple of 4,
 * padding only at the end.
 * ------------------------------------------------------------------------- */

static bool base64_decode(const char *s, size_t len, rd_buf_t *out)
{
    if (len % 4 != 0 || len > (size_t)INT32_MAX) return false;
    size_t pad = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '+' || c == '/';
        if (c == '=' && i + 2 >= len) {
            pad++;
            continue;
        }
        if (!alpha || pad > 0) return false;
    }
    if (len == 0) return true;
    rd_buf_reserve(out, len / 4 * 3 + 1);
    int n = EVP_DecodeBlock((unsigned char *)out->data + out->len, (const unsigned char *)s, (int)len);
    if (n < 0) return false;
    out->len += (size_t)n - pad;
    out->data[out->len] = '\0';
    return true;
}

static void base64_encode(const char *s, size_t len, rd_buf_t *out)
{
    rd_buf_reserve(out, (len + 2) / 3 * 4 + 1);
    int n = EVP_EncodeBlock((unsigned char *)out->data + out->len, (const unsigned char *)s, (int)len);
    out->len += (size_t)n;
}

/* ---------------------------------------------------------------------------
 * Validation
 * ------------------------------------------------------------------------- */

static bool starts_with_ci(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++) {
        char c = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
        char p = *prefix >= 'A' && *prefix <= 'Z' ? (char)(*prefix - 'A' + 'a') : *prefix;
        if (c != p) return false;
    }
    return true;
}

/* SQS's rule for an attribute name; NULL when it holds, else what is wrong. */
static const char *name_problem(const char *name)
{
    size_t len = strlen(name);
    if (len == 0) return "is empty";
    if (len > NAME_MAX_BYTES) return "is longer than 256 characters";
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return "may hold only A-Z, a-z, 0-9, '_', '-' and '.'";
    }
    if (starts_with_ci(name, "aws.") || starts_with_ci(name, "amazon."))
        return "may not start with AWS. or Amazon.";
    if (name[0] == '.' || name[len - 1] == '.') return "may not start or end with '.'";
    if (strstr(name, "..")) return "may not hold '..'";
    return NULL;
}

/* True when s is a decimal number SQS takes: [+-]digits[.digits][e[+-]digits],
 * at most 38 significant digits, magnitude within 10^-128 .. 10^126. */
static bool number_ok(const char *s)
{
    size_t i = 0;
    if (s[i] == '+' || s[i] == '-') i++;
    size_t int_digits = 0, frac_digits = 0, significant = 0, lead_zeros_frac = 0;
    bool nonzero = false;
    long int_after_zeros = 0;
    for (; s[i] >= '0' && s[i] <= '9'; i++, int_digits++) {
        if (s[i] != '0') nonzero = true;
        if (nonzero) {
            significant++;
            int_after_zeros++;
        }
    }
    if (s[i] == '.') {
        for (i++; s[i] >= '0' && s[i] <= '9'; i++, frac_digits++) {
            if (s[i] != '0') nonzero = true;
            if (nonzero) significant++;
            else lead_zeros_frac++;
        }
    }
    if (int_digits + frac_digits == 0) return false;
    long exp = 0;
    if (s[i] == 'e' || s[i] == 'E') {
        i++;
        bool neg = false;
        if (s[i] == '+' || s[i] == '-') neg = s[i++] == '-';
        size_t exp_digits = 0;
        for (; s[i] >= '0' && s[i] <= '9'; i++, exp_digits++)
            if (exp < 100000) exp = exp * 10 + (s[i] - '0');
        if (exp_digits == 0) return false;
        if (neg) exp = -exp;
    }
    if (s[i] != '\0') return false;
    if (significant > NUMBER_MAX_DIGITS) return false;
    if (!nonzero) return true;  /* zero */
    long magnitude = int_after_zeros > 0 ? int_after_zeros - 1 + exp
                                         : -(long)lead_zeros_frac - 1 + exp;
    return magnitude >= NUMBER_MIN_EXP && magnitude <= NUMBER_MAX_EXP;
}

/* "String", "Number", "Binary", each optionally ".label": the transport byte,
 * or 0 when the type is none of these. */
static int type_transport(const char *type, bool *is_number)
{
    static const struct { const char *base; int transport; } bases[] = {
        { "String", TRANSPORT_STRING }, { "Number", TRANSPORT_STRING }, { "Binary", TRANSPORT_BINARY },
    };
    size_t len = strlen(type);
    if (len > TYPE_MAX_BYTES || !rd_sqs_body_chars_ok(type, len)) return 0;
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        size_t b = strlen(bases[i].base);
        if (strncmp(type, bases[i].base, b) != 0) continue;
        if (type[b] == '\0' || (type[b] == '.' && type[b + 1] != '\0')) {
            *is_number = i == 1;
            return bases[i].transport;
        }
    }
    return 0;
}

static void put_u32(rd_buf_t *b, size_t v)
{
    unsigned char be[4] = { (unsigned char)(v >> 24), (unsigned char)(v >> 16), (unsigned char)(v >> 8),
                            (unsigned char)v };
    rd_buf_append(b, be, 4);
}

static void put_field(rd_buf_t *b, const char *s, size_t len)
{
    put_u32(b, len);
    rd_buf_append(b, s, len);
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static bool nonempty_list(const cJSON *v)
{
    return v != NULL && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 0);
}

/* Validates one attribute and appends it to blob; 0 or -1 with why. */
static int pack_one(const cJSON *item, rd_buf_t *blob, size_t *size, char *why, size_t why_len)
{
    const char *name = item->string;
    const char *problem = name_problem(name);
    if (problem) {
        /* The name may be long or odd: quote a bounded, printable prefix. */
        bool printable = rd_sqs_body_chars_ok(name, strlen(name));
        snprintf(why, why_len, "Message attribute name '%.64s' %s", printable ? name : "?", problem);
        return -1;
    }
    if (!cJSON_IsObject(item)) {
        snprintf(why, why_len, "Message attribute '%s' must be a structure", name);
        return -1;
    }
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "DataType");
    if (!cJSON_IsString(type) || type->valuestring[0] == '\0') {
        snprintf(why, why_len, "The message attribute '%s' must contain a non-empty message attribute type.", name);
        return -1;
    }
    bool is_number = false;
    int transport = type_transport(type->valuestring, &is_number);
    if (transport == 0) {
        snprintf(why, why_len, "The type of message (user) attribute '%s' is invalid. You must use only the "
                 "following supported type prefixes: Binary, Number, String.", name);
        return -1;
    }
    if (nonempty_list(cJSON_GetObjectItemCaseSensitive(item, "StringListValues")) ||
        nonempty_list(cJSON_GetObjectItemCaseSensitive(item, "BinaryListValues"))) {
        snprintf(why, why_len, "Message attribute '%s': StringListValues and BinaryListValues are not "
                 "supported", name);
        return -1;
    }
    const char *field = transport == TRANSPORT_BINARY ? "BinaryValue" : "StringValue";
    const cJSON *value = cJSON_GetObjectItemCaseSensitive(item, field);
    const char *kind = transport == TRANSPORT_BINARY ? "Binary" : is_number ? "Number" : "String";
    if (!cJSON_IsString(value) || value->valuestring[0] == '\0') {
        snprintf(why, why_len, "Message (user) attribute '%s' must contain a non-empty value of type '%s'.",
                 name, kind);
        return -1;
    }
    size_t name_len = strlen(name), type_len = strlen(type->valuestring);
    size_t value_len = strlen(value->valuestring);
    put_field(blob, name, name_len);
    put_field(blob, type->valuestring, type_len);
    rd_buf_putc(blob, (char)transport);
    if (transport == TRANSPORT_BINARY) {
        rd_buf_t bytes = RD_BUF_INIT;
        if (!base64_decode(value->valuestring, value_len, &bytes)) {
            rd_buf_free(&bytes);
            snprintf(why, why_len, "Message (user) attribute '%s': BinaryValue is not valid base64", name);
            return -1;
        }
        put_field(blob, bytes.data ? bytes.data : "", bytes.len);
        *size += name_len + type_len + bytes.len;
        rd_buf_free(&bytes);
        return 0;
    }
    if (!rd_sqs_body_chars_ok(value->valuestring, value_len)) {
        snprintf(why, why_len, "Message (user) attribute '%s' value contains invalid characters", name);
        return -1;
    }
    if (is_number && !number_ok(value->valuestring)) {
        snprintf(why, why_len, "Can't cast the value of message (user) attribute '%s' to a number.", name);
        return -1;
    }
    put_field(blob, value->valuestring, value_len);
    *size += name_len + type_len + value_len;
    return 0;
}

int rd_sqs_attributes_pack(const cJSON *attrs, rd_buf_t *out, size_t *size, char *why, size_t why_len)
{
    *size = 0;
    if (attrs == NULL || cJSON_IsNull(attrs)) return 0;
    if (!cJSON_IsObject(attrs)) {
        snprintf(why, why_len, "MessageAttributes must be a map");
        return -1;
    }
    int n = cJSON_GetArraySize(attrs);
    if (n == 0) return 0;
    if (n > RD_SQS_MAX_ATTRIBUTES) {
        snprintf(why, why_len, "Number of message attributes [%d] exceeds the allowed maximum [%d].", n,
                 RD_SQS_MAX_ATTRIBUTES);
        return -1;
    }
    const cJSON *items[RD_SQS_MAX_ATTRIBUTES] = { 0 };
    int k = 0;
    for (const cJSON *c = attrs->child; c && k < n; c = c->next) items[k++] = c;
    qsort(items, (size_t)n, sizeof items[0], by_name);
    rd_buf_t blob = RD_BUF_INIT;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (i > 0 && strcmp(items[i - 1]->string, items[i]->string) == 0) {
            snprintf(why, why_len, "Message attribute name '%.64s' is given more than once",
                     items[i]->string);
            rc = -1;
            break;
        }
        rc = pack_one(items[i], &blob, size, why, why_len);
    }
    if (rc == 0) rd_buf_append(out, blob.data, blob.len);
    else *size = 0;
    rd_buf_free(&blob);
    return rc;
}

/* ---------------------------------------------------------------------------
 * Reading a blob back
 * ------------------------------------------------------------------------- */

typedef struct attr_view {
    const char *start;      /* the whole packed attribute */
    size_t raw_len;
    char name[NAME_MAX_BYTES + 1];
    const char *type;
    size_t type_len;
    int transport;
    const char *value;
    size_t value_len;
} attr_view_t;

static bool get_field(const char *blob, size_t len, size_t *pos, const char **s, size_t *n)
{
    if (len - *pos < 4) return false;
    const unsigned char *u = (const unsigned char *)blob + *pos;
    size_t v = (size_t)u[0] << 24 | (size_t)u[1] << 16 | (size_t)u[2] << 8 | u[3];
    *pos += 4;
    if (len - *pos < v) return false;
    *s = blob + *pos;
    *n = v;
    *pos += v;
    return true;
}

/* The attribute at *pos: 1 and *pos past it, 0 at the end, -1 when the bytes
 * are no packed attribute. */
static int next_attr(const char *blob, size_t len, size_t *pos, attr_view_t *a)
{
    if (*pos == len) return 0;
    a->start = blob + *pos;
    const char *name;
    size_t name_len;
    if (!get_field(blob, len, pos, &name, &name_len) || name_len == 0 || name_len > NAME_MAX_BYTES ||
        memchr(name, '\0', name_len))
        return -1;
    memcpy(a->name, name, name_len);
    a->name[name_len] = '\0';
    if (!get_field(blob, len, pos, &a->type, &a->type_len) || a->type_len == 0 ||
        a->type_len > TYPE_MAX_BYTES || memchr(a->type, '\0', a->type_len) || *pos == len)
        return -1;
    a->transport = (unsigned char)blob[(*pos)++];
    if (a->transport != TRANSPORT_STRING && a->transport != TRANSPORT_BINARY) return -1;
    if (!get_field(blob, len, pos, &a->value, &a->value_len)) return -1;
    if (a->transport == TRANSPORT_STRING && memchr(a->value, '\0', a->value_len)) return -1;
    a->raw_len = (size_t)(blob + *pos - a->start);
    return 1;
}

cJSON *rd_sqs_attributes_unpack(const char *blob, size_t len,
                                bool (*want)(const char *name, void *arg), void *arg)
{
    cJSON *out = cJSON_CreateObject();
    size_t pos = 0;
    attr_view_t a;
    int rc;
    rd_buf_t text = RD_BUF_INIT;
    while ((rc = next_attr(blob, len, &pos, &a)) == 1) {
        if (want && !want(a.name, arg)) continue;
        cJSON *v = cJSON_CreateObject();
        rd_buf_reset(&text);
        rd_buf_append(&text, a.type, a.type_len);
        cJSON_AddStringToObject(v, "DataType", text.data);
        rd_buf_reset(&text);
        if (a.transport == TRANSPORT_BINARY) base64_encode(a.value, a.value_len, &text);
        else rd_buf_append(&text, a.value, a.value_len);
        cJSON_AddStringToObject(v, a.transport == TRANSPORT_BINARY ? "BinaryValue" : "StringValue",
                                text.data ? text.data : "");
        cJSON_AddItemToObject(out, a.name, v);
    }
    rd_buf_free(&text);
    if (rc < 0) {
        cJSON_Delete(out);
        return NULL;
    }
    return out;
}

int rd_sqs_attributes_select(const char *blob, size_t len,
                             bool (*want)(const char *name, void *arg), void *arg, rd_buf_t *out)
{
    size_t pos = 0;
    attr_view_t a;
    int rc;
    rd_buf_t kept = RD_BUF_INIT;
    while ((rc = next_attr(blob, len, &pos, &a)) == 1)
        if (want == NULL || want(a.name, arg)) rd_buf_append(&kept, a.start, a.raw_len);
    if (rc == 0) rd_buf_append(out, kept.data, kept.len);
    rd_buf_free(&kept);
    return rc < 0 ? -1 : 0;
}
