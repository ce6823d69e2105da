/* durability.c - warns at each connect about Redis settings that could lose
 * messages (docs/durability.md). */
#include "retryd/durability.h"

#include <string.h>

#include "retryd/log.h"

static bool str_is(rd_str_t s, const char *z)
{
    return s.ptr && s.len == strlen(z) && memcmp(s.ptr, z, s.len) == 0;
}

static void on_config(const rd_store_strings_t *res, void *arg)
{
    (void)arg;
    if (res->head.status != RD_STORE_OK) {
        rd_debug("store: cannot read Redis's CONFIG; durability not checked");
        return;
    }
    for (size_t i = 0; i + 1 < res->count; i += 2) {
        rd_str_t name = res->strings[i], value = res->strings[i + 1];
        if (value.ptr == NULL) continue;
        if (str_is(name, "appendonly") && !str_is(value, "yes"))
            rd_warn("durability: Redis runs without AOF (appendonly no): a Redis crash loses "
                    "every message since the last snapshot; see docs/durability.md");
        else if (str_is(name, "appendfsync") && str_is(value, "no"))
            rd_warn("durability: appendfsync no: a machine crash can lose ~30 s of messages");
        else if (str_is(name, "maxmemory-policy") && !str_is(value, "noeviction"))
            rd_warn("durability: maxmemory-policy is %.*s: under memory pressure Redis may "
                    "evict message keys; use noeviction", (int)value.len, value.ptr);
    }
}

void rd_durability_check(rd_store_t *st)
{
    rd_store_config_get(st, "ap*", on_config, NULL);
    rd_store_config_get(st, "maxmemory-policy", on_config, NULL);
}
