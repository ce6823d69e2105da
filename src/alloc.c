/* alloc.c - allocation wrappers that abort on out-of-memory. */
#include "retryd/alloc.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void out_of_memory(size_t size)
{
    fprintf(stderr, "retryd: out of memory allocating %zu bytes\n", size);
    abort();
}

void *rd_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (p == NULL) out_of_memory(size);
    return p;
}

void *rd_calloc(size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (p == NULL) out_of_memory(count * size);
    return p;
}

void *rd_realloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (p == NULL) out_of_memory(size);
    return p;
}

char *rd_strndup(const char *s, size_t len)
{
    char *p = rd_malloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *rd_strdup(const char *s)
{
    return rd_strndup(s, strlen(s));
}

void rd_free(void *ptr)
{
    free(ptr);
}

void rd_alloc_init(void)
{
    cJSON_Hooks hooks = { .malloc_fn = rd_malloc, .free_fn = rd_free };
    cJSON_InitHooks(&hooks);
}
