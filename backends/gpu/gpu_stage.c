/* Loading a stage onto a GPU: weights copied from the mapped safetensors (q/k/v and gate/up
 * stacked so each is one GEMM), KV cache per layer, one scratch block and one pinned block. */
#include "backends/gpu/gpu_internal.h"

#include "common/log.h"
#include "common/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CONVERT_CHUNK ((size_t)1 << 22) /* elements converted on the host at a time */
#define S_MARGIN ((uint64_t)64 << 20)     /* device memory left free after a stage loads */

static float s_elem_f32(pl_dtype_t dt, const void *src, size_t i)
{
    switch (dt) {
    case PL_DT_F16:
        return pl_f16_to_f32(((const uint16_t *)src)[i]);
    case PL_DT_BF16:
        return pl_bf16_to_f32(((const uint16_t *)src)[i]);
    default:
        return ((const float *)src)[i];
    }
}

static void s_elem_store(pl_dtype_t dt, void *dst, size_t i, float v)
{
    switch (dt) {
    case PL_DT_F16:
        ((uint16_t *)dst)[i] = pl_f32_to_f16(v);
        break;
    case PL_DT_BF16:
        ((uint16_t *)dst)[i] = pl_f32_to_bf16(v);
        break;
    default:
        ((float *)dst)[i] = v;
    }
}

/* The GPU kernels read f32, f16 and bf16 weights; a quantized tensor is refused by name, before
 * any device memory is taken (quantized GPU kernels are a later issue). */
static pl_status_t s_check_wtype(const char *name, const pl_tensor_view_t *v)
{
    const pl_wtype_info_t *wi = pl_wtype_info(v->wtype);
    if (!wi || wi->quantized)
        return pl_error(PL_ERR_UNSUPPORTED,
                        "gpu stage: tensor '%s' is %s, a quantized weight type: the GPU backends "
                        "have no quantized kernels yet (place this stage on a CPU)",
                        name, pl_wtype_name(v->wtype));
    return PL_OK;
}

/* Copy tensor `name` of shape [rows][cols] to device memory dst in dtype dt, converting on the
 * host when the file stores another dtype. */
static pl_status_t s_upload(pl_model_t *model, const char *name, int64_t rows, int64_t cols,
                            pl_dtype_t dt, void *dst)
{
    int64_t shape[2] = {rows, cols};
    pl_tensor_view_t v;
    pl_status_t st;
    int ndim = cols > 0 ? 2 : 1;
    if (ndim == 1)
        shape[0] = rows;
    if ((st = pl_model_tensor_shaped(model, name, ndim, shape, &v)) || (st = s_check_wtype(name, &v)))
        return st;
    if (v.dtype == dt)
        return pl_gpu_status(cudaMemcpy(dst, v.data, v.nbytes, cudaMemcpyHostToDevice), name);

    size_t es = pl_dtype_size(dt), n = (size_t)v.numel;
    void *tmp = malloc(PL_MIN(n, S_CONVERT_CHUNK) * es);
    if (!tmp)
        return pl_error(PL_ERR_NOMEM, "out of memory converting %s", name);
    for (size_t i0 = 0; i0 < n && !st; i0 += S_CONVERT_CHUNK) {
        size_t cnt = PL_MIN(S_CONVERT_CHUNK, n - i0);
        for (size_t i = 0; i < cnt; i++)
            s_elem_store(dt, tmp, i, s_elem_f32(v.dtype, v.data, i0 + i));
        st = pl_gpu_status(cudaMemcpy((char *)dst + i0 * es, tmp, cnt * es, cudaMemcpyHostToDevice),
                           name);
    }
    free(tmp);
    return st;
}

static pl_status_t s_alloc(void **p, size_t bytes, const char *what)
{
    return pl_gpu_status(cudaMalloc(p, bytes ? bytes : 1), what);
}

static pl_status_t s_load_layer(pl_gpu_stage_t *st, pl_model_t *model, int li, pl_gpu_layer_t *L)
{
    const pl_model_config_t *c = &st->cfg;
    int64_t H = c->hidden, I = c->intermediate, hd = c->head_dim;
    int64_t q_dim = (int64_t)c->n_heads * hd, kv_dim = (int64_t)c->n_kv_heads * hd;
    size_t ws = pl_dtype_size(st->w_dt), ks = pl_dtype_size(st->kv_dt);
    size_t cache = (size_t)st->p.max_seqs * st->p.max_ctx * kv_dim * ks;
    char name[160];
    pl_status_t s;

#define S_NAME(suffix) (snprintf(name, sizeof(name), "model.layers.%d.%s", li, suffix), name)
    if ((s = s_alloc(&L->w_qkv, (size_t)(q_dim + 2 * kv_dim) * H * ws, "qkv weights")) ||
        (s = s_alloc(&L->w_o, (size_t)H * q_dim * ws, "o_proj weights")) ||
        (s = s_alloc(&L->w_gu, (size_t)2 * I * H * ws, "gate/up weights")) ||
        (s = s_alloc(&L->w_down, (size_t)H * I * ws, "down_proj weights")) ||
        (s = s_alloc((void **)&L->ln_attn, (size_t)H * 4, "norm weights")) ||
        (s = s_alloc((void **)&L->ln_mlp, (size_t)H * 4, "norm weights")) ||
        (s = s_alloc(&L->k_cache, cache, "K cache")) ||
        (s = s_alloc(&L->v_cache, cache, "V cache")))
        return s;
    char *qkv = L->w_qkv, *gu = L->w_gu;
    if ((s = s_upload(model, S_NAME("self_attn.q_proj.weight"), q_dim, H, st->w_dt, qkv)) ||
        (s = s_upload(model, S_NAME("self_attn.k_proj.weight"), kv_dim, H, st->w_dt,
                      qkv + (size_t)q_dim * H * ws)) ||
        (s = s_upload(model, S_NAME("self_attn.v_proj.weight"), kv_dim, H, st->w_dt,
                      qkv + (size_t)(q_dim + kv_dim) * H * ws)) ||
        (s = s_upload(model, S_NAME("self_attn.o_proj.weight"), H, q_dim, st->w_dt, L->w_o)) ||
        (s = s_upload(model, S_NAME("mlp.gate_proj.weight"), I, H, st->w_dt, gu)) ||
        (s = s_upload(model, S_NAME("mlp.up_proj.weight"), I, H, st->w_dt,
                      gu + (size_t)I * H * ws)) ||
        (s = s_upload(model, S_NAME("mlp.down_proj.weight"), H, I, st->w_dt, L->w_down)) ||
        (s = s_upload(model, S_NAME("input_layernorm.weight"), H, 0, PL_DT_F32, L->ln_attn)) ||
        (s = s_upload(model, S_NAME("post_attention_layernorm.weight"), H, 0, PL_DT_F32,
                      L->ln_mlp)))
        return s;
#undef S_NAME
    /* unwritten cache rows are never read, but zeros keep a stray read harmless */
    if ((s = pl_gpu_status(cudaMemset(L->k_cache, 0, cache), "K cache")) ||
        (s = pl_gpu_status(cudaMemset(L->v_cache, 0, cache), "V cache")))
        return s;
    return PL_OK;
}

static void s_free_layer(pl_gpu_layer_t *L)
{
    void *ptrs[] = {L->w_qkv,   L->w_o,    L->w_gu,    L->w_down,
                    L->ln_attn, L->ln_mlp, L->k_cache, L->v_cache};
    for (size_t i = 0; i < PL_ARRAY_SIZE(ptrs); i++)
        if (ptrs[i])
            cudaFree(ptrs[i]);
    memset(L, 0, sizeof(*L));
}

/* The dtype the stage keeps its matrices in: the file's dtype of its first matrix. */
static pl_status_t s_weight_dtype(pl_model_t *model, const pl_be_stage_params_t *p,
                                  const pl_model_config_t *c, pl_dtype_t *dt_p)
{
    char name[160];
    pl_tensor_view_t v;
    pl_status_t st;
    if (p->last_layer >= p->first_layer)
        snprintf(name, sizeof(name), "model.layers.%d.self_attn.q_proj.weight", p->first_layer);
    else if (p->has_embed || c->tie_embeddings)
        snprintf(name, sizeof(name), "model.embed_tokens.weight");
    else
        snprintf(name, sizeof(name), "lm_head.weight");
    if ((st = pl_model_tensor(model, name, &v)) || (st = s_check_wtype(name, &v)))
        return st;
    *dt_p = v.dtype;
    return PL_OK;
}

static void s_views(pl_gpu_stage_t *st)
{
    const pl_gpu_layout_t *l = &st->lay;
    unsigned char *d = st->dev_base, *h = st->host_base;
    st->resid = (float *)(d + l->resid);
    st->xa = d + l->xa;
    st->fb = (float *)(d + l->fb);
    st->cos_tab = (float *)(d + l->cos_tab);
    st->sin_tab = (float *)(d + l->sin_tab);
    st->inv_freq = (double *)(d + l->inv_freq);
    st->work = (float *)(d + l->work);
    st->xh = d + l->xh;
    st->logits = (float *)(d + l->logits);
    st->meta_d = (int32_t *)(d + l->meta);
    st->meta_h = (int32_t *)(h + l->h_meta);
    st->in_h = (float *)(h + l->h_in);
    st->out_h = (float *)(h + l->h_out);
}

static pl_status_t s_load_ends(pl_gpu_stage_t *st, pl_model_t *model)
{
    const pl_model_config_t *c = &st->cfg;
    size_t vh = (size_t)c->vocab * c->hidden * pl_dtype_size(st->w_dt);
    pl_status_t s;
    if (st->p.has_embed) {
        if ((s = s_alloc(&st->w_embed, vh, "embedding")) ||
            (s = s_upload(model, "model.embed_tokens.weight", c->vocab, c->hidden, st->w_dt,
                          st->w_embed)))
            return s;
    }
    if (!st->p.has_head)
        return PL_OK;
    if ((s = s_alloc((void **)&st->final_norm, (size_t)c->hidden * 4, "final norm")) ||
        (s = s_upload(model, "model.norm.weight", c->hidden, 0, PL_DT_F32, st->final_norm)))
        return s;
    if (c->tie_embeddings && st->p.has_embed) {
        st->w_lm = st->w_embed;
        st->lm_is_embed = true;
        return PL_OK;
    }
    if ((s = s_alloc(&st->w_lm, vh, "LM head")))
        return s;
    return s_upload(model, c->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
                    c->vocab, c->hidden, st->w_dt, st->w_lm);
}

pl_status_t pl_gpu_stage_load(void *dev_v, pl_model_t *model, const pl_be_stage_params_t *params,
                              void **stage_p)
{
    pl_gpu_dev_t *dev = dev_v;
    const pl_model_config_t *cfg = pl_model_config(model);
    pl_gpu_stage_t *st;
    pl_status_t s;
    size_t free_b = 0, total_b = 0;

    if ((s = pl_gpu_stage_check(cfg, params)))
        return s;
    if ((s = pl_gpu_status(cudaSetDevice(dev->index), "cudaSetDevice")))
        return s;
    if (!(st = calloc(1, sizeof(*st))))
        return pl_error(PL_ERR_NOMEM, "out of memory");
    st->dev = dev;
    st->cfg = *cfg;
    st->p = *params;
    st->n_layers = params->last_layer >= params->first_layer
                       ? params->last_layer - params->first_layer + 1
                       : 0;
    st->scale = 1.0f / sqrtf((float)cfg->head_dim);
#if defined(__HIP_PLATFORM_AMD__)
    st->use_graphs = pl_gpu_env_flag("PL_GPU_GRAPHS", false);
#else
    st->use_graphs = pl_gpu_env_flag("PL_GPU_GRAPHS", true);
#endif
    if ((s = s_weight_dtype(model, params, cfg, &st->w_dt)))
        goto err;
    if ((s = pl_gpu_status(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking),
                           "cudaStreamCreate")))
        goto err;
    if ((s = pl_gpu_blas_create(st->stream, pl_gpu_env_flag("PL_GPU_GEMM", true), &st->blas)))
        goto err;
    st->act_dt = pl_gpu_blas_vendor(st->blas) ? st->w_dt : PL_DT_F32;
    st->kv_dt = pl_gpu_env_flag("PL_GPU_KV_F32", false) ? PL_DT_F32 : st->w_dt;
    if ((s = pl_gpu_layout(cfg, params, st->w_dt, st->act_dt, st->kv_dt, &st->lay)))
        goto err;

    uint64_t need = (uint64_t)st->lay.weight_bytes + st->lay.kv_bytes + st->lay.dev_bytes;
    if ((s = pl_gpu_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo")))
        goto err;
    if (need + S_MARGIN > free_b) {
        s = pl_error(PL_ERR_NOMEM,
                     "stage needs %llu MiB on %s device %d (weights %zu, KV %zu, "
                     "buffers %zu MiB), %zu MiB free",
                     (unsigned long long)(need >> 20), PL_GPU_BACKEND, dev->info.index,
                     st->lay.weight_bytes >> 20, st->lay.kv_bytes >> 20, st->lay.dev_bytes >> 20,
                     free_b >> 20);
        goto err;
    }
    if ((s = s_alloc((void **)&st->dev_base, st->lay.dev_bytes, "stage buffers")) ||
        (s = pl_gpu_status(cudaMallocHost((void **)&st->host_base, st->lay.host_bytes),
                           "pinned host buffers")))
        goto err;
    s_views(st);

    int n_half = cfg->head_dim / 2;
    double inv_freq[PL_GPU_PLAN_MAX_HEAD_DIM / 2];
    pl_model_rope_inv_freq(cfg, inv_freq);
    if ((s = pl_gpu_status(cudaMemcpy(st->inv_freq, inv_freq, (size_t)n_half * sizeof(double),
                                      cudaMemcpyHostToDevice),
                           "rope table")))
        goto err;

    if (!(st->layers = calloc((size_t)(st->n_layers ? st->n_layers : 1), sizeof(*st->layers))) ||
        !(st->filled = calloc((size_t)params->max_seqs, sizeof(*st->filled))) ||
        !(st->graphs = calloc((size_t)params->max_seqs, sizeof(*st->graphs)))) {
        s = pl_error(PL_ERR_NOMEM, "out of memory");
        goto err;
    }
    for (int i = 0; i < st->n_layers; i++)
        if ((s = s_load_layer(st, model, params->first_layer + i, &st->layers[i])))
            goto err;
    if ((s = s_load_ends(st, model)))
        goto err;
    if ((s = pl_gpu_status(cudaDeviceSynchronize(), "stage load")))
        goto err;
    pl_log_info("%s device %d: layers %d..%d%s%s loaded, %s weights %zu MiB, KV %s %zu MiB, "
                "gemm %s, graphs %s",
                PL_GPU_BACKEND, dev->info.index, params->first_layer, params->last_layer,
                params->has_embed ? " +embed" : "", params->has_head ? " +head" : "",
                pl_dtype_name(st->w_dt), st->lay.weight_bytes >> 20, pl_dtype_name(st->kv_dt),
                st->lay.kv_bytes >> 20, pl_gpu_blas_desc(st->blas), st->use_graphs ? "on" : "off");
    *stage_p = st;
    return PL_OK;

err:
    pl_gpu_stage_unload(st);
    return s;
}

void pl_gpu_stage_unload(void *stage)
{
    pl_gpu_stage_t *st = stage;
    if (!st)
        return;
    cudaSetDevice(st->dev->index);
    if (st->stream)
        cudaStreamSynchronize(st->stream);
    pl_gpu_graphs_clear(st);
    for (int i = 0; st->layers && i < st->n_layers; i++)
        s_free_layer(&st->layers[i]);
    if (st->w_embed)
        cudaFree(st->w_embed);
    if (st->w_lm && !st->lm_is_embed)
        cudaFree(st->w_lm);
    if (st->final_norm)
        cudaFree(st->final_norm);
    if (st->dev_base)
        cudaFree(st->dev_base);
    if (st->host_base)
        cudaFreeHost(st->host_base);
    pl_gpu_blas_destroy(&st->blas);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    free(st->graphs);
    free(st->filled);
    free(st->layers);
    free(st);
}

void pl_gpu_stage_free_seq(void *stage, int slot)
{
    pl_gpu_stage_t *st = stage;
    if (st && slot >= 0 && slot < st->p.max_seqs)
        st->filled[slot] = 0;
}
