/* AMD device health for the HIP plugin: runtime facts only. This build does not use ROCm SMI
 * (not packaged on Debian 12), so utilisation, temperature and power are reported as absent. */
#include "backends/gpu/gpu_internal.h"

pl_status_t pl_gpu_smi_memory(int index, uint64_t *free_p, uint64_t *total_p)
{
    (void)index;
    (void)free_p;
    (void)total_p;
    return pl_error(PL_ERR_UNSUPPORTED, "no ROCm SMI in this build");
}

/* Health of HIP device `index` (as probe numbers them) as a new JSON object. */
pl_status_t pl_gpu_health(int index, json_t **out)
{
    json_t *o = NULL;
    int rt = -1;
    pl_status_t st = pl_gpu_health_base(index, &o, &rt);
    if (st)
        return st;
    json_object_set_new(o, "smi", json_false());
    json_object_set_new(o, "smi_error", json_string("no ROCm SMI in this build"));
    *out = o;
    return PL_OK;
}
