/* Small shared helpers: clocks, whole-file reads, base64, a counter-based random generator. */
#ifndef PL_COMMON_UTIL_H
#define PL_COMMON_UTIL_H

#include "common/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define PL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define PL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Monotonic time in seconds. */
double pl_now(void);

/* Read a whole file into a NUL-terminated malloc'd buffer of at most max_len bytes.
 * On error the message names the path. *buf_p is the caller's to free. */
pl_status_t pl_file_read(const char *path, size_t max_len, char **buf_p, size_t *len_p);

/* Join dir and name into out ("dir/name"); name is returned as is when absolute. */
pl_status_t pl_path_join(const char *dir, const char *name, char *out, size_t out_len);

/* Directory part of path (".", when none) copied into out. */
void pl_path_dirname(const char *path, char *out, size_t out_len);

/* Base64 (RFC 4648). The returned string / buffer is the caller's to free. */
char *pl_base64_encode(const void *data, size_t len);
pl_status_t pl_base64_decode(const char *text, void **data_p, size_t *len_p);

/* Counter-based random numbers: the value depends only on (key, counter), never on call order,
 * so a sequence's random stream does not depend on how work is split. */
uint64_t pl_rand_u64(uint64_t key, uint64_t counter);
/* Uniform in [0, 1) with 24 bits of precision. */
float pl_rand_uniform(uint64_t key, uint64_t counter);
/* Mix several words into one key. */
uint64_t pl_rand_key(uint64_t a, uint64_t b, uint64_t c);

/* fp16 / bf16 <-> f32 conversions (round to nearest even on the way down). */
float pl_f16_to_f32(uint16_t h);
uint16_t pl_f32_to_f16(float f);
float pl_bf16_to_f32(uint16_t b);
uint16_t pl_f32_to_bf16(float f);

#endif
