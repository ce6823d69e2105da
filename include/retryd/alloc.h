/* alloc.h - allocation wrappers that abort on out-of-memory.
 *
 * Every allocation in retryd goes through these: running out of memory is not
 * an error we can answer, so it ends the process with a message. rd_alloc_init
 * also installs them into cJSON. */
#ifndef RETRYD_ALLOC_H
#define RETRYD_ALLOC_H

#include <stddef.h>

void rd_alloc_init(void);
void *rd_malloc(size_t size);
void *rd_calloc(size_t count, size_t size);
void *rd_realloc(void *ptr, size_t size);
char *rd_strndup(const char *s, size_t len);
char *rd_strdup(const char *s);
void rd_free(void *ptr);

#endif
