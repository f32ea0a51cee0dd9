/* A CPU stage's weight matrices copied into anonymous memory with transparent huge pages:
 * measured, the page-cache pages of the GGUF mapping slowed the stage's dots (bench/README.md). */
#include "backends/cpu/cpu_wcopy.h"
#include "backends/cpu/cpu_pack.h"

#include "common/log.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define S_HUGE ((size_t)2 << 20)
#define S_ALIGN ((size_t)64)

bool pl_cpu_wcopy_wanted(void)
{
    const char *v = getenv("PL_CPU_WEIGHTS");
    return !v || strcmp(v, "mapped") != 0;
}

bool pl_cpu_wcopy_pack_wanted(void)
{
    const char *v = getenv("PL_CPU_WEIGHTS");
    return v && strcmp(v, "packed") == 0;
}

/* Bytes of m's copy: packed, or as it is. */
static size_t s_bytes(const pl_cpu_wmat_t *m, bool pack)
{
    return m->packed || (pack && pl_cpu_pack_suits(m)) ? pl_cpu_pack_bytes(m)
                                                       : (size_t)m->rows * m->row_bytes;
}

/* The earlier matrix with the same data as mats[i], or -1. */
static int s_shared(pl_cpu_wmat_t *const *mats, int i)
{
    for (int j = 0; j < i; j++)
        if (mats[j] && mats[j]->data == mats[i]->data)
            return j;
    return -1;
}

pl_status_t pl_cpu_wcopy_make(pl_cpu_wmat_t *const *mats, int n, bool pack, pl_cpu_wcopy_t *c_p)
{
    size_t len = 0;
    const void **dst;
    bool *packed;
    unsigned char *base;

    for (int i = 0; i < n; i++) {
        if (!mats[i] || !mats[i]->data || s_shared(mats, i) >= 0)
            continue;
        size_t b = (s_bytes(mats[i], pack) + S_ALIGN - 1) & ~(S_ALIGN - 1);
        if (b < s_bytes(mats[i], pack) || len > SIZE_MAX - S_HUGE - b)
            return pl_error(PL_ERR_RANGE, "cpu stage: weights too large to copy");
        len += b;
    }
    if (len == 0) {
        *c_p = (pl_cpu_wcopy_t){0};
        return PL_OK;
    }
    len = (len + S_HUGE - 1) & ~(S_HUGE - 1);
    /* one huge page more, so the region can start on a 2 MiB boundary */
    size_t map_len = len + S_HUGE;
    void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return pl_error(PL_ERR_NOMEM, "cpu stage: mmap of %zu bytes for the weights: %s", map_len,
                        strerror(errno));
    base = (unsigned char *)(((uintptr_t)m + S_HUGE - 1) & ~(uintptr_t)(S_HUGE - 1));
    size_t head = (size_t)(base - (unsigned char *)m);
    if (head)
        munmap(m, head);
    if (map_len - head > len)
        munmap(base + len, map_len - head - len);
    if (madvise(base, len, MADV_HUGEPAGE) != 0)
        pl_log_debug("cpu stage: madvise(MADV_HUGEPAGE): %s (weights on 4 KiB pages)",
                     strerror(errno));
    dst = calloc((size_t)n, sizeof(*dst));
    packed = calloc((size_t)n, sizeof(*packed));
    if (!dst || !packed) {
        free(dst);
        free(packed);
        munmap(base, len);
        return pl_error(PL_ERR_NOMEM, "cpu stage: out of memory");
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (!mats[i] || !mats[i]->data)
            continue;
        int j = s_shared(mats, i);
        if (j >= 0) {
            dst[i] = dst[j];
            packed[i] = packed[j];
            continue;
        }
        packed[i] = pack && pl_cpu_pack_suits(mats[i]);
        if (packed[i])
            pl_cpu_pack(mats[i], base + off);
        else
            memcpy(base + off, mats[i]->data, s_bytes(mats[i], false));
        dst[i] = base + off;
        off += (s_bytes(mats[i], pack) + S_ALIGN - 1) & ~(S_ALIGN - 1);
    }
    /* every copy made: only now repoint, so an error above leaves the matrices as they were */
    for (int i = 0; i < n; i++)
        if (dst[i]) {
            mats[i]->data = dst[i];
            mats[i]->packed = mats[i]->packed || packed[i];
        }
    free(dst);
    free(packed);
    *c_p = (pl_cpu_wcopy_t){.base = base, .len = len};
    return PL_OK;
}

void pl_cpu_wcopy_free(pl_cpu_wcopy_t *c)
{
    if (c && c->base)
        munmap(c->base, c->len);
    if (c)
        *c = (pl_cpu_wcopy_t){0};
}
