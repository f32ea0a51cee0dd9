/* The backend table of a GPU plugin and its exported entry point. The plugin carries its own
 * copy of pl_common, so each wrapper also hands a failure's message to the host's copy when the
 * host exports pl_error (linked with -rdynamic); the registry reads the plugin's pl_error_msg. */
#include "backends/gpu/gpu_internal.h"

#include "common/status.h"

#include <dlfcn.h>
#include <pthread.h>

#define PL_EXPORT __attribute__((visibility("default")))

typedef pl_status_t (*s_host_error_fn)(pl_status_t, const char *, ...);
static s_host_error_fn s_host_error;
static pthread_once_t s_host_once = PTHREAD_ONCE_INIT;

static void s_find_host(void)
{
    s_host_error_fn f = (s_host_error_fn)dlsym(RTLD_DEFAULT, "pl_error");
    if (f && f != (s_host_error_fn)pl_error)
        s_host_error = f;
}

/* Pass a failure's message to the host's per-thread slot as well. */
static pl_status_t s_ret(pl_status_t st)
{
    if (st == PL_OK)
        return st;
    pthread_once(&s_host_once, s_find_host);
    if (s_host_error)
        s_host_error(st, "%s", pl_error_msg());
    return st;
}

static pl_status_t s_probe(pl_be_device_info_t *infos, int max, int *n_p)
{
    return s_ret(pl_gpu_probe(infos, max, n_p));
}

static pl_status_t s_open(int index, int threads, void **dev_p)
{
    return s_ret(pl_gpu_open(index, threads, dev_p));
}

static pl_status_t s_calibrate(void *dev, pl_be_calib_t *calib)
{
    return s_ret(pl_gpu_calibrate(dev, calib));
}

static pl_status_t s_stage_load(void *dev, pl_model_t *model, const pl_be_stage_params_t *params,
                                void **stage_p)
{
    return s_ret(pl_gpu_stage_load(dev, model, params, stage_p));
}

static pl_status_t s_stage_forward(void *stage, const pl_be_batch_t *batch, const void *in,
                                   void *out)
{
    return s_ret(pl_gpu_stage_forward(stage, batch, in, out));
}

static const pl_be_ops_t s_plugin_ops = {
    .abi_version = PL_BE_ABI_VERSION,
    .name = PL_GPU_BACKEND,
    .probe = s_probe,
    .open = s_open,
    .close = pl_gpu_close,
    .calibrate = s_calibrate,
    .stage_load = s_stage_load,
    .stage_forward = s_stage_forward,
    .stage_free_seq = pl_gpu_stage_free_seq,
    .stage_unload = pl_gpu_stage_unload,
};

/* The plugin entry point the registry looks up by PL_BE_PLUGIN_SYMBOL. */
PL_EXPORT const pl_be_ops_t *pl_be_plugin_ops(void);
PL_EXPORT const pl_be_ops_t *pl_be_plugin_ops(void)
{
    return &s_plugin_ops;
}
