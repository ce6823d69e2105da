/* keys.c - Redis key names and the injective escape of queue names. */
#include "retryd/keys.h"

static int needs_escape(unsigned char c)
{
    return c < 0x20 || c == 0x7f || c == '%' || c == '{' || c == '}' || c == ':';
}

void rd_keys_escape_queue(rd_buf_t *out, const char *name, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    rd_buf_reserve(out, len);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (needs_escape(c)) {
            char esc[3] = { '%', hex[c >> 4], hex[c & 15] };
            rd_buf_append(out, esc, 3);
        } else {
            rd_buf_append(out, &name[i], 1);
        }
    }
}

/* "<prefix>:{<escaped queue>", a base without its closing brace. */
static void open_tag(rd_buf_t *out, const char *prefix, const char *queue, size_t len)
{
    rd_buf_puts(out, prefix);
    rd_buf_puts(out, ":{");
    rd_keys_escape_queue(out, queue, len);
}

void rd_keys_queue_base(rd_buf_t *out, const char *prefix, const char *queue, size_t len)
{
    open_tag(out, prefix, queue, len);
    rd_buf_puts(out, "}");
}

void rd_keys_wake(rd_buf_t *out, const char *prefix, const char *queue, size_t len)
{
    rd_keys_queue_base(out, prefix, queue, len);
    rd_buf_puts(out, ":wake");
}

void rd_keys_message(rd_buf_t *out, const char *base, size_t base_len, long long id)
{
    rd_buf_append(out, base, base_len);
    rd_buf_printf(out, ":m:%lld", id);
}

void rd_keys_registry(rd_buf_t *out, const char *prefix)
{
    rd_buf_puts(out, prefix);
    rd_buf_puts(out, ":queues");
}

void rd_keys_shard_base(rd_buf_t *out, const char *prefix, const char *queue, size_t len,
                        int shard, int salt)
{
    open_tag(out, prefix, queue, len);
    if (shard == 0) rd_buf_puts(out, "}");
    else rd_buf_printf(out, ":%d.%d}", shard, salt);
}
