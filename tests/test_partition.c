/* The proportional split: shares follow the rates, every device gets a layer, memory caps hold,
 * and an impossible split is reported with how much memory is missing. */
#include "scheduler/partition.h"

#include <criterion/criterion.h>
#include <string.h>

#define GIB (1ull << 30)

static void s_check_cover(const int *first, const int *count, int n, int layers)
{
    int at = 0;
    for (int i = 0; i < n; i++) {
        cr_assert_eq(first[i], at);
        cr_assert_geq(count[i], 1);
        at += count[i];
    }
    cr_assert_eq(at, layers);
}

Test(partition, proportional_to_rate)
{
    pl_part_device_t d[3] = {{1, 100 * GIB}, {2, 100 * GIB}, {1, 100 * GIB}};
    pl_part_model_t m = {.n_layers = 32, .layer_bytes = GIB / 4};
    int first[3], count[3];
    cr_assert_eq(pl_part_proportional(d, 3, &m, first, count), PL_OK);
    s_check_cover(first, count, 3, 32);
    cr_assert_eq(count[0], 8);
    cr_assert_eq(count[1], 16);
    cr_assert_eq(count[2], 8);
}

Test(partition, memory_caps_hold_and_slow_devices_get_one)
{
    /* a huge fast device with little memory, a slow one with plenty */
    pl_part_device_t d[2] = {{100, 3 * GIB}, {1, 100 * GIB}};
    pl_part_model_t m = {.n_layers = 10, .layer_bytes = GIB, .first_extra = GIB / 2};
    int first[3], count[3];
    cr_assert_eq(pl_part_proportional(d, 2, &m, first, count), PL_OK);
    s_check_cover(first, count, 2, 10);
    cr_assert_eq(count[0], 2, "3 GiB holds the embedding and two 1 GiB layers");
    pl_part_device_t e[3] = {{1000, 100 * GIB}, {1, 100 * GIB}, {1, 100 * GIB}};
    cr_assert_eq(pl_part_proportional(e, 3, &m, first, count), PL_OK);
    s_check_cover(first, count, 3, 10);
    cr_assert_eq(count[1], 1);
    cr_assert_eq(count[2], 1);
}

Test(partition, infeasible_reports_missing_memory)
{
    pl_part_device_t d[2] = {{1, 2 * GIB}, {1, 2 * GIB}};
    pl_part_model_t m = {.n_layers = 8, .layer_bytes = GIB};
    int first[2], count[2];
    cr_assert_eq(pl_part_proportional(d, 2, &m, first, count), PL_ERR_INFEASIBLE);
    cr_assert(strstr(pl_error_msg(), "missing"), "%s", pl_error_msg());
    pl_part_device_t tiny[2] = {{1, GIB / 2}, {1, 100 * GIB}};
    cr_assert_eq(pl_part_proportional(tiny, 2, &m, first, count), PL_ERR_INFEASIBLE);
    cr_assert(strstr(pl_error_msg(), "device 0"), "%s", pl_error_msg());
    cr_assert_eq(pl_part_proportional(d, 2, &(pl_part_model_t){.n_layers = 1}, first, count),
                 PL_ERR_INFEASIBLE);
    pl_part_device_t zero[1] = {{0, GIB}};
    cr_assert_eq(pl_part_proportional(zero, 1, &m, first, count), PL_ERR_INVALID);
}

Test(partition, random_instances_cover_and_fit)
{
    unsigned seed = 12345;
    for (int it = 0; it < 2000; it++) {
        pl_part_device_t d[8];
        int first[8], count[8];
        int n = 1 + (int)(rand_r(&seed) % 8);
        pl_part_model_t m = {.n_layers = n + (int)(rand_r(&seed) % 90),
                             .layer_bytes = 1 + rand_r(&seed) % 1000,
                             .first_extra = rand_r(&seed) % 3000,
                             .last_extra = rand_r(&seed) % 3000};
        for (int i = 0; i < n; i++)
            d[i] = (pl_part_device_t){.rate = 0.1 + rand_r(&seed) % 100,
                                      .mem_bytes = rand_r(&seed) % 60000};
        if (pl_part_proportional(d, n, &m, first, count) != PL_OK)
            continue;
        s_check_cover(first, count, n, m.n_layers);
        for (int i = 0; i < n; i++) {
            uint64_t need = (uint64_t)count[i] * m.layer_bytes + (i == 0 ? m.first_extra : 0) +
                            (i == n - 1 ? m.last_extra : 0);
            cr_assert_leq(need, d[i].mem_bytes, "instance %d device %d over its memory", it, i);
        }
    }
}
