/* Internal to the GPU plugins (CUDA and HIP builds of the same host code): the opened device,
 * a loaded stage, the GEMM dispatcher and the table slots implemented in gpu_device.c,
 * gpu_stage.c and gpu_forward.c. */
#ifndef PL_BACKENDS_GPU_GPU_INTERNAL_H
#define PL_BACKENDS_GPU_GPU_INTERNAL_H

#include "backends/backend_impl.h"
#include "backends/gpu/gpu_kernels.h"
#include "backends/gpu/gpu_plan.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Convert a runtime error where it enters: PL_OK on success, else PL_ERR_NOMEM for allocation
 * failures and PL_ERR_BACKEND otherwise, with "what: <runtime message>" recorded. */
pl_status_t pl_gpu_status(cudaError_t e, const char *what);

typedef struct {
    int index; /* runtime device index */
    pl_be_device_info_t info;
    int sm_count;
} pl_gpu_dev_t;

/* ---- GEMM: the vendor BLAS (cuBLAS, loaded at run time) or the built-in kernels ---- */
typedef struct pl_gpu_blas pl_gpu_blas_t;

/* A GEMM context bound to `stream` on the current device; uses the vendor library when
 * want_vendor and it loads and starts, else the built-in kernels: a missing library or a failed
 * library setup is no error, pl_gpu_blas_desc says which runs and why (and a failed setup is
 * logged as a warning). Fails only when out of host memory. */
pl_status_t pl_gpu_blas_create(cudaStream_t stream, bool want_vendor, pl_gpu_blas_t **blas_p);
void pl_gpu_blas_destroy(pl_gpu_blas_t **blas_p);
/* True when GEMMs go through the vendor library; GEMM inputs are then in the weight dtype,
 * else f32. */
bool pl_gpu_blas_vendor(const pl_gpu_blas_t *blas);
/* "cublas 130001" or "builtin (why the vendor library is not used)". Borrowed. */
const char *pl_gpu_blas_desc(const pl_gpu_blas_t *blas);
/* y[m][n] (+)= x[m][k] . w[n][k]^T, f32 accumulation and output. */
pl_status_t pl_gpu_gemm(pl_gpu_blas_t *blas, const void *x, pl_dtype_t x_dt, int m, int k,
                        const void *w, pl_dtype_t w_dt, int n, float *y, bool accumulate);
/* Whether the vendor library can be loaded in this process, and why not. */
bool pl_gpu_blas_available(char *why, size_t why_len);

/* ---- devices ---- */
/* Backend device index (position among the usable devices probe lists) to the runtime's
 * device index, with its properties; PL_ERR_NO_DEVICE without a runtime. */
pl_status_t pl_gpu_runtime_index(int index, int *rt_p, pl_gpu_prop_t *prop);
pl_status_t pl_gpu_probe(pl_be_device_info_t *infos, int max, int *n_p);
pl_status_t pl_gpu_open(int index, int threads, void **dev_p);
void pl_gpu_close(void *dev);
pl_status_t pl_gpu_calibrate(void *dev, pl_be_calib_t *calib);

/* Device memory (free, total) from the vendor management library (NVML), without creating a
 * context; PL_ERR_UNSUPPORTED when the library is absent. Implemented per vendor. */
pl_status_t pl_gpu_smi_memory(int index, uint64_t *free_p, uint64_t *total_p);

/* Runtime-level health of backend device `index` (name, PCI bus id, capability, memory,
 * versions) as a new JSON object; *rt_p gets the runtime index. */
pl_status_t pl_gpu_health_base(int index, json_t **out_p, int *rt_p);
/* The whole health of backend device `index` (the table's health slot): the runtime's part and
 * the management library's. Implemented per vendor. */
pl_status_t pl_gpu_health(int index, json_t **out_p);

/* ---- stages ---- */
typedef struct {
    void *w_qkv;  /* [(heads + 2 kv) * hd][hidden]: q, k, v projections stacked */
    void *w_o;    /* [hidden][heads * hd] */
    void *w_gu;   /* [2 * inter][hidden]: gate then up */
    void *w_down; /* [hidden][inter] */
    float *ln_attn, *ln_mlp;
    void *k_cache, *v_cache; /* [max_seqs][max_ctx][kv * hd] */
} pl_gpu_layer_t;

typedef struct {
    int uses;             /* forwards seen with this shape */
    cudaGraphExec_t exec; /* NULL until captured */
} pl_gpu_graph_t;

typedef struct {
    pl_gpu_dev_t *dev;
    pl_model_config_t cfg;
    pl_be_stage_params_t p;
    int n_layers;
    pl_dtype_t w_dt, act_dt, kv_dt;
    pl_gpu_layout_t lay;
    pl_gpu_layer_t *layers;
    void *w_embed, *w_lm;
    bool lm_is_embed; /* tied head sharing the embedding buffer */
    float *final_norm;
    cudaStream_t stream;
    pl_gpu_blas_t *blas;
    unsigned char *dev_base, *host_base;
    /* views into dev_base / host_base, see pl_gpu_layout_t */
    float *resid, *fb, *cos_tab, *sin_tab, *work, *logits;
    void *xa, *xh;
    double *inv_freq;
    int32_t *meta_d, *meta_h;
    float *in_h, *out_h;
    int *filled; /* per slot: positions already in the KV cache */
    float scale; /* 1 / sqrt(head_dim) */
    bool use_graphs;
    pl_gpu_graph_t *graphs; /* [max_seqs], by n_seq - 1 */
} pl_gpu_stage_t;

pl_status_t pl_gpu_stage_load(void *dev, pl_model_t *model, const pl_be_stage_params_t *params,
                              void **stage_p);
void pl_gpu_stage_unload(void *stage);
void pl_gpu_stage_free_seq(void *stage, int slot);
pl_status_t pl_gpu_stage_forward(void *stage, const pl_be_batch_t *batch, const void *in,
                                 void *out);
/* Drop every captured graph (after a failure, or at unload). */
void pl_gpu_graphs_clear(pl_gpu_stage_t *st);

/* The table of this build: the plugin's entry point returns it; statically linked users such as
 * the parity test call it directly. */
const pl_be_ops_t *pl_gpu_ops(void);

/* Environment switches, read when a stage loads: PL_GPU_GEMM=builtin|vendor,
 * PL_GPU_GRAPHS=0|1. */
bool pl_gpu_env_flag(const char *name, bool dflt);

#endif
