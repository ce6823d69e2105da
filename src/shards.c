/* shards.c - the hash, ids and cursor prefix of a sharded queue
 * (docs/sharding.md sections 1, 2 and 6). */
#include "retryd/shards.h"

enum {
    FNV_OFFSET = 2166136261u,
    FNV_PRIME = 16777619u,
    JUMP_STIR = 0xA5,
};

uint32_t rd_shards_fnv(const void *bytes, size_t len)
{
    const unsigned char *p = bytes;
    uint32_t h = FNV_OFFSET;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* Lamping and Veach's jump hash with its 64-bit generator replaced by FNV
 * steps, so that Lua 5.1's doubles and bash compute it too. The quotient is
 * exact here; in a double it is exact too wherever it decides anything
 * (below 64 its ulp is far under 1/(x+1)). */
int rd_shards_jump(uint32_t hash, int n)
{
    uint32_t x = hash;
    long long b = -1, j = 0;
    while (j < n) {
        b = j;
        x = (x ^ JUMP_STIR) * FNV_PRIME;
        j = (long long)(((uint64_t)(b + 1) << 32) / ((uint64_t)x + 1));
    }
    return (int)b;
}

int rd_shards_pick(const void *bytes, size_t len, int n)
{
    return rd_shards_jump(rd_shards_fnv(bytes, len), n);
}

long long rd_shards_id(int shard, long long n)
{
    if (shard < 0 || shard >= RD_SHARDS_MAX || n < 1 || n >= RD_SHARD_SPAN) return -1;
    return (long long)shard * RD_SHARD_SPAN + n;
}

bool rd_shards_id_valid(long long id)
{
    return id >= 1 && id < RD_SHARDS_MAX * RD_SHARD_SPAN && id % RD_SHARD_SPAN != 0;
}

int rd_shards_of_id(long long id)
{
    return rd_shards_id_valid(id) ? (int)(id / RD_SHARD_SPAN) : -1;
}

long long rd_shards_local(long long id)
{
    return rd_shards_id_valid(id) ? id % RD_SHARD_SPAN : -1;
}

void rd_shards_cursor_format(rd_buf_t *out, int shard, const char *cursor, size_t len)
{
    rd_buf_printf(out, "s%d.", shard);
    rd_buf_append(out, cursor, len);
}

int rd_shards_cursor_parse(const char *cursor, size_t len, int *shard, const char **rest,
                           size_t *rest_len)
{
    *shard = 0;
    *rest = cursor;
    *rest_len = len;
    size_t i = 1;
    while (i < len && cursor[i] >= '0' && cursor[i] <= '9') i++;
    size_t digits = i - 1;
    if (len == 0 || cursor[0] != 's' || digits == 0 || i == len || cursor[i] != '.')
        return 0;  /* no prefix: shard 0's cursor, whole */
    if (digits > 2 || (digits == 2 && cursor[1] == '0')) return -1;
    int k = cursor[1] - '0';
    if (digits == 2) k = k * 10 + (cursor[2] - '0');
    if (k >= RD_SHARDS_MAX) return -1;
    *shard = k;
    *rest = cursor + i + 1;
    *rest_len = len - i - 1;
    return 0;
}
