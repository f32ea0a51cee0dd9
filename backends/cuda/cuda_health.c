/* NVIDIA management data through NVML, opened with dlopen at run time (the plugin loads without
 * it): utilisation, temperature, power, memory, ECC counts and XID errors seen since first asked.
 */
#include "backends/gpu/gpu_internal.h"

#include "common/log.h"
#include "common/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* The few NVML types and constants used, as in nvml.h (not installed here; the ABI is stable). */
typedef int s_nvml_ret_t;
typedef struct s_nvml_device *s_nvml_device_t;
typedef struct s_nvml_event_set *s_nvml_event_set_t;
typedef struct {
    unsigned int gpu, memory;
} s_nvml_util_t;
typedef struct {
    unsigned long long total, free, used;
} s_nvml_mem_t;
typedef struct {
    s_nvml_device_t device;
    unsigned long long event_type, event_data;
    unsigned int gpu_instance, compute_instance;
} s_nvml_event_t;

#define S_NVML_SUCCESS 0
#define S_NVML_ERROR_TIMEOUT 10
#define S_NVML_TEMPERATURE_GPU 0
#define S_NVML_CLOCK_SM 1
#define S_NVML_ECC_CORRECTED 0
#define S_NVML_ECC_UNCORRECTED 1
#define S_NVML_VOLATILE_ECC 0
#define S_NVML_EVENT_XID 0x8ULL
#define S_MAX_DEVICES 64

static struct {
    void *lib;
    char why[256];
    s_nvml_ret_t (*init)(void);
    const char *(*error_string)(s_nvml_ret_t);
    s_nvml_ret_t (*by_pci)(const char *, s_nvml_device_t *);
    s_nvml_ret_t (*utilization)(s_nvml_device_t, s_nvml_util_t *);
    s_nvml_ret_t (*temperature)(s_nvml_device_t, int, unsigned int *);
    s_nvml_ret_t (*power)(s_nvml_device_t, unsigned int *);
    s_nvml_ret_t (*power_limit)(s_nvml_device_t, unsigned int *);
    s_nvml_ret_t (*memory)(s_nvml_device_t, s_nvml_mem_t *);
    s_nvml_ret_t (*ecc_mode)(s_nvml_device_t, int *, int *);
    s_nvml_ret_t (*ecc_total)(s_nvml_device_t, int, int, unsigned long long *);
    s_nvml_ret_t (*clock)(s_nvml_device_t, int, unsigned int *);
    s_nvml_ret_t (*event_set_create)(s_nvml_event_set_t *);
    s_nvml_ret_t (*register_events)(s_nvml_device_t, unsigned long long, s_nvml_event_set_t);
    s_nvml_ret_t (*event_wait)(s_nvml_event_set_t, s_nvml_event_t *, unsigned int);
    s_nvml_ret_t (*driver_version)(char *, unsigned int);
} s_nvml;
static pthread_once_t s_nvml_once = PTHREAD_ONCE_INIT;

/* XID events per runtime device, counted from the first health call on. */
static struct {
    bool tried;
    s_nvml_event_set_t set;
    unsigned long long count, last;
    char why[128];
} s_xid[S_MAX_DEVICES];
static pthread_mutex_t s_xid_lock = PTHREAD_MUTEX_INITIALIZER;

#define S_SYM(field, name)                                                                         \
    do {                                                                                           \
        s_nvml.field = (__typeof__(s_nvml.field))dlsym(s_nvml.lib, name);                          \
        if (!s_nvml.field && !s_nvml.why[0])                                                       \
            snprintf(s_nvml.why, sizeof(s_nvml.why), "libnvidia-ml lacks %s", name);               \
    } while (0)

/* NVML stays initialised for the life of the process once loaded (event sets live in it). */
static void s_nvml_load(void)
{
    s_nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!s_nvml.lib) {
        snprintf(s_nvml.why, sizeof(s_nvml.why), "NVML not loadable: %s", dlerror());
        return;
    }
    S_SYM(init, "nvmlInit_v2");
    S_SYM(error_string, "nvmlErrorString");
    S_SYM(by_pci, "nvmlDeviceGetHandleByPciBusId_v2");
    S_SYM(utilization, "nvmlDeviceGetUtilizationRates");
    S_SYM(temperature, "nvmlDeviceGetTemperature");
    S_SYM(power, "nvmlDeviceGetPowerUsage");
    S_SYM(power_limit, "nvmlDeviceGetEnforcedPowerLimit");
    S_SYM(memory, "nvmlDeviceGetMemoryInfo");
    S_SYM(ecc_mode, "nvmlDeviceGetEccMode");
    S_SYM(ecc_total, "nvmlDeviceGetTotalEccErrors");
    S_SYM(clock, "nvmlDeviceGetClockInfo");
    S_SYM(event_set_create, "nvmlEventSetCreate");
    S_SYM(register_events, "nvmlDeviceRegisterEvents");
    S_SYM(event_wait, "nvmlEventSetWait_v2");
    S_SYM(driver_version, "nvmlSystemGetDriverVersion");
    s_nvml_ret_t r;
    if (!s_nvml.why[0] && (r = s_nvml.init()) != S_NVML_SUCCESS)
        snprintf(s_nvml.why, sizeof(s_nvml.why), "nvmlInit: %s", s_nvml.error_string(r));
    if (s_nvml.why[0]) {
        dlclose(s_nvml.lib);
        s_nvml.lib = NULL;
    }
}

/* NVML handle of runtime device rt, matched by PCI bus id (NVML and CUDA orders can differ). */
static pl_status_t s_handle(int rt, s_nvml_device_t *dev_p)
{
    char bus[64];
    s_nvml_ret_t r;
    pthread_once(&s_nvml_once, s_nvml_load);
    if (!s_nvml.lib)
        return pl_error(PL_ERR_UNSUPPORTED, "%s", s_nvml.why);
    if (cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), rt) != cudaSuccess) {
        (void)cudaGetLastError();
        return pl_error(PL_ERR_BACKEND, "cuda device %d: no PCI bus id", rt);
    }
    if ((r = s_nvml.by_pci(bus, dev_p)) != S_NVML_SUCCESS)
        return pl_error(PL_ERR_BACKEND, "NVML device %s: %s", bus, s_nvml.error_string(r));
    return PL_OK;
}

pl_status_t pl_gpu_smi_memory(int index, uint64_t *free_p, uint64_t *total_p)
{
    s_nvml_device_t d;
    s_nvml_mem_t m;
    pl_status_t st;
    if ((st = s_handle(index, &d)))
        return st;
    if (s_nvml.memory(d, &m) != S_NVML_SUCCESS)
        return pl_error(PL_ERR_BACKEND, "nvmlDeviceGetMemoryInfo failed");
    *free_p = m.free;
    *total_p = m.total;
    return PL_OK;
}

/* Drain pending XID events of device rt into the counters (registering on first use). */
static void s_xid_poll(int rt, s_nvml_device_t d, json_t *o)
{
    if (rt < 0 || rt >= S_MAX_DEVICES)
        return;
    pthread_mutex_lock(&s_xid_lock);
    if (!s_xid[rt].tried) {
        s_nvml_ret_t r;
        s_xid[rt].tried = true;
        if ((r = s_nvml.event_set_create(&s_xid[rt].set)) != S_NVML_SUCCESS ||
            (r = s_nvml.register_events(d, S_NVML_EVENT_XID, s_xid[rt].set)) != S_NVML_SUCCESS) {
            snprintf(s_xid[rt].why, sizeof(s_xid[rt].why), "XID events: %s",
                     s_nvml.error_string(r));
            s_xid[rt].set = NULL;
        }
    }
    if (s_xid[rt].set) {
        s_nvml_event_t ev;
        while (s_nvml.event_wait(s_xid[rt].set, &ev, 0) == S_NVML_SUCCESS) {
            s_xid[rt].count++;
            s_xid[rt].last = ev.event_data;
        }
        json_object_set_new(o, "xid_errors", json_integer((json_int_t)s_xid[rt].count));
        json_object_set_new(o, "last_xid", json_integer((json_int_t)s_xid[rt].last));
    } else {
        json_object_set_new(o, "xid_unavailable", json_string(s_xid[rt].why));
    }
    pthread_mutex_unlock(&s_xid_lock);
}

static void s_nvml_fields(int rt, json_t *o)
{
    s_nvml_device_t d;
    s_nvml_util_t u;
    s_nvml_mem_t m;
    unsigned int v;
    int cur = 0, pend = 0;
    unsigned long long cnt;
    char drv[96];

    if (s_handle(rt, &d) != PL_OK) {
        json_object_set_new(o, "nvml", json_false());
        json_object_set_new(o, "nvml_error", json_string(pl_error_msg()));
        return;
    }
    json_object_set_new(o, "nvml", json_true());
    if (s_nvml.driver_version(drv, sizeof(drv)) == S_NVML_SUCCESS)
        json_object_set_new(o, "nvidia_driver", json_string(drv));
    if (s_nvml.utilization(d, &u) == S_NVML_SUCCESS) {
        json_object_set_new(o, "utilization_gpu_pct", json_integer(u.gpu));
        json_object_set_new(o, "utilization_memory_pct", json_integer(u.memory));
    }
    if (s_nvml.temperature(d, S_NVML_TEMPERATURE_GPU, &v) == S_NVML_SUCCESS)
        json_object_set_new(o, "temperature_c", json_integer(v));
    if (s_nvml.power(d, &v) == S_NVML_SUCCESS)
        json_object_set_new(o, "power_w", json_real(v / 1000.0));
    if (s_nvml.power_limit(d, &v) == S_NVML_SUCCESS)
        json_object_set_new(o, "power_limit_w", json_real(v / 1000.0));
    if (s_nvml.clock(d, S_NVML_CLOCK_SM, &v) == S_NVML_SUCCESS)
        json_object_set_new(o, "clock_sm_mhz", json_integer(v));
    if (s_nvml.memory(d, &m) == S_NVML_SUCCESS) {
        json_object_set_new(o, "memory_used_bytes", json_integer((json_int_t)m.used));
        json_object_set_new(o, "memory_free_bytes", json_integer((json_int_t)m.free));
    }
    if (s_nvml.ecc_mode(d, &cur, &pend) == S_NVML_SUCCESS) {
        json_object_set_new(o, "ecc_enabled", json_boolean(cur));
        if (cur && s_nvml.ecc_total(d, S_NVML_ECC_UNCORRECTED, S_NVML_VOLATILE_ECC, &cnt) ==
                       S_NVML_SUCCESS)
            json_object_set_new(o, "ecc_uncorrected_volatile", json_integer((json_int_t)cnt));
        if (cur &&
            s_nvml.ecc_total(d, S_NVML_ECC_CORRECTED, S_NVML_VOLATILE_ECC, &cnt) == S_NVML_SUCCESS)
            json_object_set_new(o, "ecc_corrected_volatile", json_integer((json_int_t)cnt));
    }
    s_xid_poll(rt, d, o);
}

/* Health of CUDA device `index` (as probe numbers them) as a new JSON object: runtime facts
 * plus NVML readings when NVML loads ("nvml": false and the reason otherwise). */
pl_status_t pl_gpu_health(int index, json_t **out)
{
    json_t *o = NULL;
    int rt = -1;
    pl_status_t st = pl_gpu_health_base(index, &o, &rt);
    if (st)
        return st;
    s_nvml_fields(rt, o);
    *out = o;
    return PL_OK;
}
