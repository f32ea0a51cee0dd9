/* Tests of the CPU stage's weight copy: contents equal to the originals byte for byte, rows
 * aligned, a shared matrix (a tied LM head) still shared, empty entries left alone. */
#include "backends/cpu/cpu_wcopy.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static unsigned char *bytes(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n + 3);
    cr_assert(p);
    uint32_t s = seed;
    for (size_t i = 0; i < n + 3; i++) {
        s = s * 1103515245u + 12345u;
        p[i] = (unsigned char)(s >> 16);
    }
    return p;
}

Test(cpu_wcopy, copies_exactly_aligned_and_keeps_sharing)
{
    /* odd sizes and an unaligned source, as a GGUF mapping gives */
    unsigned char *a = bytes(34 * 7, 1), *b = bytes(3 * 210, 2);
    pl_cpu_wmat_t m0 = {.type = PL_WT_Q8_0, .rows = 7, .cols = 32, .row_bytes = 34, .data = a + 1};
    pl_cpu_wmat_t m1 = {.type = PL_WT_Q4_K, .rows = 3, .cols = 256, .row_bytes = 210, .data = b};
    pl_cpu_wmat_t tied = m0, empty = {0};
    pl_cpu_wmat_t *mats[] = {&m0, NULL, &empty, &m1, &tied};
    pl_cpu_wcopy_t c;

    cr_assert_eq(pl_cpu_wcopy_make(mats, 5, false, &c), PL_OK);
    cr_assert_not_null(c.base);
    cr_assert_eq((uintptr_t)c.base % (2u << 20), 0, "region on a 2 MiB boundary");
    cr_assert_neq(m0.data, a + 1);
    cr_assert_eq((uintptr_t)m0.data % 64, 0);
    cr_assert_eq((uintptr_t)m1.data % 64, 0);
    cr_assert_eq(memcmp(m0.data, a + 1, 34 * 7), 0);
    cr_assert_eq(memcmp(m1.data, b, 3 * 210), 0);
    cr_assert_eq(tied.data, m0.data, "a tied matrix stays one copy");
    cr_assert_null(empty.data);
    const unsigned char *lo = c.base, *hi = lo + c.len;
    cr_assert((const unsigned char *)m1.data >= lo && (const unsigned char *)m1.data + 630 <= hi);
    cr_assert(m1.data != m0.data);
    pl_cpu_wcopy_free(&c);
    cr_assert_null(c.base);
    pl_cpu_wcopy_free(&c); /* twice is fine */
    free(a);
    free(b);
}

Test(cpu_wcopy, nothing_to_copy_is_no_region)
{
    pl_cpu_wmat_t empty = {0};
    pl_cpu_wmat_t *mats[] = {&empty, NULL};
    pl_cpu_wcopy_t c = {.base = (void *)1};

    cr_assert_eq(pl_cpu_wcopy_make(mats, 2, false, &c), PL_OK);
    cr_assert_null(c.base);
    cr_assert_eq(c.len, 0);
}

Test(cpu_wcopy, environment_switch)
{
    unsetenv("PL_CPU_WEIGHTS");
    cr_assert(pl_cpu_wcopy_wanted());
    cr_assert_not(pl_cpu_wcopy_pack_wanted());
    setenv("PL_CPU_WEIGHTS", "mapped", 1);
    cr_assert_not(pl_cpu_wcopy_wanted());
    setenv("PL_CPU_WEIGHTS", "packed", 1);
    cr_assert(pl_cpu_wcopy_wanted());
    cr_assert(pl_cpu_wcopy_pack_wanted());
    unsetenv("PL_CPU_WEIGHTS");
}
