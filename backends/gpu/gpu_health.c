/* Runtime-level health of a GPU for `pipectl health`: what the CUDA / HIP runtime says about
 * the device without creating a context. Vendor management data (NVML) is added per vendor. */
#include "backends/gpu/gpu_internal.h"

#include <stdio.h>

pl_status_t pl_gpu_health_base(int index, json_t **out_p, int *rt_p)
{
    pl_gpu_prop_t prop;
    int rt = -1, drv = 0, run = 0;
    char bus[64] = "";
    char cc[16];
    pl_status_t st;

    if ((st = pl_gpu_runtime_index(index, &rt, &prop)))
        return st;
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), rt) != cudaSuccess)
        bus[0] = '\0';
    (void)cudaGetLastError();
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&run);
    snprintf(cc, sizeof(cc), "%d.%d", prop.major, prop.minor);
    json_t *o = json_pack(
        "{s:s, s:i, s:i, s:s, s:s, s:s, s:i, s:I, s:i, s:i}", "backend", PL_GPU_BACKEND, "index",
        index, "runtime_index", rt, "name", prop.name, "pci_bus_id", bus, "compute_capability", cc,
        "multiprocessors", prop.multiProcessorCount, "memory_total_bytes",
        (json_int_t)prop.totalGlobalMem, "driver_version", drv, "runtime_version", run);
    if (!o)
        return pl_error(PL_ERR_NOMEM, "out of memory");
#if defined(__HIP_PLATFORM_AMD__)
    json_object_set_new(o, "arch", json_string(prop.gcnArchName));
#endif
    *out_p = o;
    *rt_p = rt;
    return PL_OK;
}
