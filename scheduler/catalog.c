/* Published peak figures of common accelerators and server CPUs, for planning clusters that do
 * not exist yet. Real devices are calibrated; these numbers are upper bounds. */
#include "scheduler/catalog.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define S_GIB (1024ull * 1024ull * 1024ull)

/* Dense (no sparsity) bf16/fp16 tensor throughput with fp32 accumulation where the vendor gives
 * both; memory as marketed (GiB-sized HBM/GDDR stacks). CPU compute: bf16 with AMX (Xeon) or
 * AVX-512 BF16 (EPYC) at base clock; CPU memory: all channels populated at rated speed. */
static const pl_sched_catalog_entry_t s_entries[] = {
    {"H100 SXM", "h100,h100 sxm5,h100 80gb hbm3,nvidia h100 80gb hbm3", "nvidia", "cuda", 989.4,
     3350.0, 80 * S_GIB},
    {"H100 PCIe", "h100 pcie 80gb,nvidia h100 pcie", "nvidia", "cuda", 756.0, 2000.0, 80 * S_GIB},
    {"H200", "h200 sxm,nvidia h200,h200 141gb", "nvidia", "cuda", 989.4, 4800.0, 141 * S_GIB},
    {"A100 80GB", "a100 sxm 80gb,a100 sxm4 80gb,nvidia a100 sxm4 80gb", "nvidia", "cuda", 312.0,
     2039.0, 80 * S_GIB},
    {"A100 40GB", "a100,a100 sxm4 40gb,nvidia a100 sxm4 40gb", "nvidia", "cuda", 312.0, 1555.0,
     40 * S_GIB},
    {"L40S", "nvidia l40s", "nvidia", "cuda", 362.05, 864.0, 48 * S_GIB},
    {"L4", "nvidia l4", "nvidia", "cuda", 121.0, 300.0, 24 * S_GIB},
    {"A10", "nvidia a10", "nvidia", "cuda", 125.0, 600.0, 24 * S_GIB},
    {"RTX A6000", "nvidia rtx a6000,a6000", "nvidia", "cuda", 154.8, 768.0, 48 * S_GIB},
    {"RTX 4090", "geforce rtx 4090,nvidia geforce rtx 4090,4090", "nvidia", "cuda", 165.2, 1008.0,
     24 * S_GIB},
    {"RTX 3090", "geforce rtx 3090,nvidia geforce rtx 3090,3090", "nvidia", "cuda", 71.0, 936.0,
     24 * S_GIB},
    {"V100 SXM2 32GB", "v100,tesla v100 sxm2 32gb", "nvidia", "cuda", 125.0, 900.0, 32 * S_GIB},
    {"MI300X", "instinct mi300x,amd instinct mi300x", "amd", "hip", 1307.4, 5300.0, 192 * S_GIB},
    {"MI250X", "instinct mi250x,amd instinct mi250x", "amd", "hip", 383.0, 3276.8, 128 * S_GIB},
    {"MI210", "instinct mi210,amd instinct mi210", "amd", "hip", 181.0, 1638.4, 64 * S_GIB},
    {"RX 7900 XTX", "radeon rx 7900 xtx,amd radeon rx 7900 xtx,7900 xtx", "amd", "hip", 122.8,
     960.0, 24 * S_GIB},
    {"EPYC 9654", "amd epyc 9654,epyc 9654 96-core", "amd", "cpu", 14.7, 460.8, 384 * S_GIB},
    {"Xeon Platinum 8480+", "xeon 8480+,intel xeon platinum 8480+,8480+", "intel", "cpu", 114.7,
     307.2, 512 * S_GIB},
    {"Desktop CPU", "generic desktop cpu,generic cpu,desktop", "generic", "cpu", 1.0, 80.0,
     32 * S_GIB},
};

int pl_sched_catalog_count(void)
{
    return (int)(sizeof(s_entries) / sizeof(s_entries[0]));
}

const pl_sched_catalog_entry_t *pl_sched_catalog_get(int i)
{
    if (i < 0 || i >= pl_sched_catalog_count())
        return NULL;
    return &s_entries[i];
}

/* Lower-case, without ' ', '-' and '_'; n bytes of s (the whole string when n is SIZE_MAX). */
static void s_norm(const char *s, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && s[i] && o + 1 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == ' ' || ch == '-' || ch == '_')
            continue;
        out[o++] = (char)tolower(ch);
    }
    out[o] = '\0';
}

const pl_sched_catalog_entry_t *pl_sched_catalog_find(const char *name)
{
    char want[128], have[128];
    if (!name || !*name) {
        pl_error(PL_ERR_NOT_FOUND, "device catalogue: empty name");
        return NULL;
    }
    s_norm(name, (size_t)-1, want, sizeof(want));
    for (int i = 0; i < pl_sched_catalog_count(); i++) {
        const pl_sched_catalog_entry_t *e = &s_entries[i];
        s_norm(e->name, (size_t)-1, have, sizeof(have));
        if (strcmp(want, have) == 0)
            return e;
        for (const char *a = e->aliases; a && *a;) {
            const char *comma = strchr(a, ',');
            size_t len = comma ? (size_t)(comma - a) : strlen(a);
            s_norm(a, len, have, sizeof(have));
            if (strcmp(want, have) == 0)
                return e;
            a = comma ? comma + 1 : a + len;
        }
    }
    pl_error(PL_ERR_NOT_FOUND, "device catalogue: no device named '%.64s'", name);
    return NULL;
}

pl_status_t pl_sched_catalog_device(const char *name, double compute_eff, double mem_eff,
                                    const char *node, const char *host, pl_sched_device_t *dev)
{
    const pl_sched_catalog_entry_t *e = pl_sched_catalog_find(name);
    if (!e)
        return PL_ERR_NOT_FOUND;
    if (compute_eff == 0)
        compute_eff = 1.0;
    if (mem_eff == 0)
        mem_eff = 1.0;
    if (!(compute_eff > 0 && compute_eff <= 1))
        return pl_error(PL_ERR_RANGE, "compute_eff: %g not in (0, 1]", compute_eff);
    if (!(mem_eff > 0 && mem_eff <= 1))
        return pl_error(PL_ERR_RANGE, "mem_eff: %g not in (0, 1]", mem_eff);
    pl_sched_device_t d;
    memset(&d, 0, sizeof(d));
    snprintf(d.name, sizeof(d.name), "%s", e->name);
    snprintf(d.node, sizeof(d.node), "%s", node ? node : "");
    snprintf(d.host, sizeof(d.host), "%s", host ? host : "");
    snprintf(d.backend, sizeof(d.backend), "%s", e->backend);
    d.gflops = e->tflops * 1000.0 * compute_eff;
    d.mem_gbps = e->mem_gbps * mem_eff;
    d.mem_bytes = e->mem_bytes;
    /* runtime context and fragmentation on a GPU; the operating system on a CPU */
    d.reserve_bytes = strcmp(e->backend, "cpu") == 0 ? 4 * S_GIB : S_GIB;
    *dev = d;
    return PL_OK;
}
