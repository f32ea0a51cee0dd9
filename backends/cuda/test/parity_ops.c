/* Per-op parity: every GPU kernel and both GEMM paths against the CPU backend's kernels or a
 * scalar reference written here, for each dtype the stages use. */
#include "backends/cuda/test/parity.h"

#include "backends/cpu/cpu_ops.h"
#include "common/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const pl_dtype_t s_dts[] = {PL_DT_F32, PL_DT_F16, PL_DT_BF16};

/* Tolerance for values rounded to dt once at the end (one unit in the last place, plus slack). */
static double s_tol(pl_dtype_t dt, double f32_tol)
{
    return dt == PL_DT_BF16 ? 1e-2 : dt == PL_DT_F16 ? 2e-3 : f32_tol;
}

static float *s_alloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void s_embed(pt_ctx_t *t)
{
    const int V = 50, H = 96, n = 7;
    const int32_t ids[] = {0, 49, 3, 3, 17, 25, 1};
    for (size_t d = 0; d < 3; d++) {
        pl_dtype_t dt = s_dts[d];
        float *tab = s_alloc((size_t)V * H), *got = s_alloc((size_t)n * H);
        float *want = s_alloc((size_t)n * H);
        pt_fill(tab, (size_t)V * H, t->seed, 1, -1.0f, 1.0f);
        pt_round(tab, (size_t)V * H, dt);
        void *tab_dt = pt_to_dtype(tab, (size_t)V * H, dt);
        void *d_tab = pt_dev_upload(tab_dt, (size_t)V * H * pl_dtype_size(dt));
        int32_t *d_ids = pt_dev_upload(ids, sizeof(ids));
        float *d_out = pt_dev_alloc((size_t)n * H * 4);
        pt_dev_sync("embed", pl_gpu_embed(d_tab, dt, H, d_ids, n, d_out, 0));
        pt_dev_download(got, d_out, (size_t)n * H * 4);
        for (int i = 0; i < n; i++)
            memcpy(want + (size_t)i * H, tab + (size_t)ids[i] * H, (size_t)H * 4);
        char what[96];
        snprintf(what, sizeof(what), "embed table=%s", pl_dtype_name(dt));
        pt_compare(t, what, got, want, (size_t)n * H, 0.0);
        cudaFree(d_out);
        cudaFree(d_ids);
        cudaFree(d_tab);
        free(tab_dt);
        free(want);
        free(got);
        free(tab);
    }
}

static void s_rmsnorm(pt_ctx_t *t)
{
    const int dims[] = {64, 1000, 5120};
    const int32_t rows[] = {4, 0, 2};
    for (size_t k = 0; k < 3; k++) {
        int D = dims[k], R = 5;
        float *x = s_alloc((size_t)R * D), *w = s_alloc((size_t)D);
        float *ref = s_alloc((size_t)R * D), *got = s_alloc((size_t)R * D);
        float *want = s_alloc((size_t)R * D);
        pt_fill(x, (size_t)R * D, t->seed, 10 + k, -3.0f, 3.0f);
        pt_fill(w, (size_t)D, t->seed, 20 + k, 0.5f, 1.5f);
        pl_cpu_rmsnorm(x, w, R, D, 1e-5f, ref);
        float *d_x = pt_dev_upload(x, (size_t)R * D * 4), *d_w = pt_dev_upload(w, (size_t)D * 4);
        int32_t *d_rows = pt_dev_upload(rows, sizeof(rows));
        void *d_out = pt_dev_alloc((size_t)R * D * 4);
        for (size_t d = 0; d < 3; d++) {
            for (int gather = 0; gather < 2; gather++) {
                pl_dtype_t dt = s_dts[d];
                int n = gather ? 3 : R;
                pt_dev_sync("rmsnorm", pl_gpu_rmsnorm(d_x, gather ? d_rows : NULL, n, D, d_w, 1e-5f,
                                                      d_out, dt, 0));
                void *raw = malloc((size_t)n * D * pl_dtype_size(dt));
                pt_dev_download(raw, d_out, (size_t)n * D * pl_dtype_size(dt));
                pt_from_dtype(raw, (size_t)n * D, dt, got);
                for (int r = 0; r < n; r++)
                    memcpy(want + (size_t)r * D, ref + (size_t)(gather ? rows[r] : r) * D,
                           (size_t)D * 4);
                pt_round(want, (size_t)n * D, dt);
                char what[96];
                snprintf(what, sizeof(what), "rmsnorm dim=%d out=%s%s", D, pl_dtype_name(dt),
                         gather ? " gathered" : "");
                /* f32: the sum of squares is in double on both sides, so the scale rounds alike
                 * and the output is the CPU's to within 2 ulp of the largest value */
                pt_compare(t, what, got, want, (size_t)n * D, s_tol(dt, 2.5e-7));
                free(raw);
            }
        }
        cudaFree(d_out);
        cudaFree(d_rows);
        cudaFree(d_w);
        cudaFree(d_x);
        free(want);
        free(got);
        free(ref);
        free(w);
        free(x);
    }
}

static void s_rope_case(pt_ctx_t *t, int hd, int max_ctx, const int *pos, const int *slot, int T,
                        bool llama3, pl_dtype_t kv_dt)
{
    const int nh = 4, nkv = 2, n_slots = 3, n_half = hd / 2;
    int qkv = (nh + 2 * nkv) * hd, kv_dim = nkv * hd;
    pl_model_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.head_dim = hd;
    cfg.rope_theta = llama3 ? 500000.0f : 10000.0f;
    cfg.rope_scaling = llama3 ? PL_ROPE_LLAMA3 : PL_ROPE_NONE;
    cfg.rope_factor = 8.0f;
    cfg.rope_low_freq_factor = 1.0f;
    cfg.rope_high_freq_factor = 4.0f;
    cfg.rope_orig_max_pos = 8192;

    double inv[PL_GPU_PLAN_MAX_HEAD_DIM / 2];
    pl_model_rope_inv_freq(&cfg, inv);
    float *x = s_alloc((size_t)T * qkv), *ref = s_alloc((size_t)T * qkv);
    float *cs = s_alloc((size_t)T * n_half), *sn = s_alloc((size_t)T * n_half);
    float *gcs = s_alloc((size_t)T * n_half), *gsn = s_alloc((size_t)T * n_half);
    pt_fill(x, (size_t)T * qkv, t->seed, 30 + (uint64_t)hd, -2.0f, 2.0f);
    memcpy(ref, x, (size_t)T * qkv * 4);
    pl_cpu_rope_table(inv, n_half, pos, T, cs, sn);
    pl_cpu_rope_apply(ref, T, qkv, nh + nkv, hd, cs, sn); /* q and k heads are adjacent */

    int32_t *d_pos = pt_dev_upload(pos, (size_t)T * 4),
            *d_slot = pt_dev_upload(slot, (size_t)T * 4);
    double *d_inv = pt_dev_upload(inv, (size_t)n_half * 8);
    float *d_x = pt_dev_upload(x, (size_t)T * qkv * 4);
    float *d_cs = pt_dev_alloc((size_t)T * n_half * 4),
          *d_sn = pt_dev_alloc((size_t)T * n_half * 4);
    size_t cache_n = (size_t)n_slots * max_ctx * kv_dim, ks = pl_dtype_size(kv_dt);
    void *d_k = pt_dev_alloc(cache_n * ks), *d_v = pt_dev_alloc(cache_n * ks);
    pt_dev_sync("rope table", pl_gpu_rope_table(d_inv, n_half, d_pos, T, d_cs, d_sn, 0));
    pt_dev_sync("rope", pl_gpu_rope_kv(d_x, T, qkv, nh, nkv, hd, d_cs, d_sn, d_slot, d_pos, d_k,
                                       d_v, kv_dt, max_ctx, 0));

    char what[128];
    const char *tag = llama3 ? " llama3" : "";
    pt_dev_download(gcs, d_cs, (size_t)T * n_half * 4);
    pt_dev_download(gsn, d_sn, (size_t)T * n_half * 4);
    snprintf(what, sizeof(what), "rope cos table hd=%d max_pos=%d%s", hd, pos[T - 1], tag);
    pt_compare(t, what, gcs, cs, (size_t)T * n_half, 2e-7);
    snprintf(what, sizeof(what), "rope sin table hd=%d max_pos=%d%s", hd, pos[T - 1], tag);
    pt_compare(t, what, gsn, sn, (size_t)T * n_half, 2e-7);

    float *got = s_alloc((size_t)T * qkv), *gk = s_alloc((size_t)T * kv_dim);
    float *wk = s_alloc((size_t)T * kv_dim), *gv = s_alloc((size_t)T * kv_dim);
    float *wv = s_alloc((size_t)T * kv_dim);
    void *raw = malloc((size_t)kv_dim * ks);
    pt_dev_download(got, d_x, (size_t)T * qkv * 4);
    float *gq = s_alloc((size_t)T * nh * hd), *wq = s_alloc((size_t)T * nh * hd);
    for (int r = 0; r < T; r++) {
        memcpy(gq + (size_t)r * nh * hd, got + (size_t)r * qkv, (size_t)nh * hd * 4);
        memcpy(wq + (size_t)r * nh * hd, ref + (size_t)r * qkv, (size_t)nh * hd * 4);
        size_t off = ((size_t)slot[r] * max_ctx + (size_t)pos[r]) * kv_dim * ks;
        pt_dev_download(raw, (char *)d_k + off, (size_t)kv_dim * ks);
        pt_from_dtype(raw, (size_t)kv_dim, kv_dt, gk + (size_t)r * kv_dim);
        pt_dev_download(raw, (char *)d_v + off, (size_t)kv_dim * ks);
        pt_from_dtype(raw, (size_t)kv_dim, kv_dt, gv + (size_t)r * kv_dim);
        memcpy(wk + (size_t)r * kv_dim, ref + (size_t)r * qkv + (size_t)nh * hd,
               (size_t)kv_dim * 4);
        memcpy(wv + (size_t)r * kv_dim, x + (size_t)r * qkv + (size_t)(nh + nkv) * hd,
               (size_t)kv_dim * 4);
    }
    pt_round(wk, (size_t)T * kv_dim, kv_dt);
    pt_round(wv, (size_t)T * kv_dim, kv_dt);
    snprintf(what, sizeof(what), "rope q hd=%d%s", hd, tag);
    pt_compare(t, what, gq, wq, (size_t)T * nh * hd, 2e-6);
    snprintf(what, sizeof(what), "rope k -> cache hd=%d kv=%s%s", hd, pl_dtype_name(kv_dt), tag);
    pt_compare(t, what, gk, wk, (size_t)T * kv_dim, s_tol(kv_dt, 2e-6));
    snprintf(what, sizeof(what), "v -> cache hd=%d kv=%s", hd, pl_dtype_name(kv_dt));
    pt_compare(t, what, gv, wv, (size_t)T * kv_dim, 0.0);

    free(raw);
    free(wq);
    free(gq);
    free(wv);
    free(gv);
    free(wk);
    free(gk);
    free(got);
    cudaFree(d_v);
    cudaFree(d_k);
    cudaFree(d_sn);
    cudaFree(d_cs);
    cudaFree(d_x);
    cudaFree(d_inv);
    cudaFree(d_slot);
    cudaFree(d_pos);
    free(gsn);
    free(gcs);
    free(sn);
    free(cs);
    free(ref);
    free(x);
}

static void s_rope(pt_ctx_t *t)
{
    const int pos_a[] = {0, 1, 5, 77, 300, 1023}, slot_a[] = {0, 1, 1, 2, 0, 2};
    const int pos_b[] = {0, 9000, 65535, 100000, 131071}, slot_b[] = {0, 1, 2, 0, 1};
    s_rope_case(t, 128, 1024, pos_a, slot_a, 6, false, PL_DT_F32);
    s_rope_case(t, 128, 1024, pos_a, slot_a, 6, false, PL_DT_BF16);
    s_rope_case(t, 64, 1024, pos_a, slot_a, 6, true, PL_DT_F16);
    s_rope_case(t, 64, 131072, pos_b, slot_b, 5, true, PL_DT_F32); /* long-context angles */
}

static void s_swiglu(pt_ctx_t *t)
{
    const int R = 3, I = 1000;
    float *gu = s_alloc((size_t)R * 2 * I), *want = s_alloc((size_t)R * I);
    float *got = s_alloc((size_t)R * I);
    pt_fill(gu, (size_t)R * 2 * I, t->seed, 40, -6.0f, 6.0f);
    float *d_gu = pt_dev_upload(gu, (size_t)R * 2 * I * 4);
    void *d_out = pt_dev_alloc((size_t)R * I * 4);
    for (size_t d = 0; d < 3; d++) {
        pl_dtype_t dt = s_dts[d];
        for (int r = 0; r < R; r++)
            for (int i = 0; i < I; i++) {
                float g = gu[(size_t)r * 2 * I + i], u = gu[(size_t)r * 2 * I + I + i];
                want[(size_t)r * I + i] = g / (1.0f + expf(-g)) * u;
            }
        pt_round(want, (size_t)R * I, dt);
        pt_dev_sync("swiglu", pl_gpu_swiglu(d_gu, R, I, d_out, dt, 0));
        void *raw = malloc((size_t)R * I * pl_dtype_size(dt));
        pt_dev_download(raw, d_out, (size_t)R * I * pl_dtype_size(dt));
        pt_from_dtype(raw, (size_t)R * I, dt, got);
        char what[64];
        snprintf(what, sizeof(what), "swiglu out=%s", pl_dtype_name(dt));
        pt_compare(t, what, got, want, (size_t)R * I, s_tol(dt, 1e-6));
        free(raw);
    }
    cudaFree(d_out);
    cudaFree(d_gu);
    free(got);
    free(want);
    free(gu);
}

/* ---- attention ---- */

typedef struct {
    int nh, nkv, hd, max_ctx, n_slots;
    pl_dtype_t kv_dt, out_dt;
} s_att_cfg_t;

/* n_seq sequences with (slot, pos0, n_tok); decode uses only n_tok == 1. The cache holds random
 * rows for every position up to pos0 + n_tok; the reference is the CPU backend's attention. */
static void s_attention(pt_ctx_t *t, const s_att_cfg_t *a, int n_seq, const int *slot,
                        const int *pos0, const int *n_tok, bool decode, int force_splits)
{
    int kv_dim = a->nkv * a->hd, q_dim = a->nh * a->hd, T = 0, max_ntok = 0;
    size_t cache_n = (size_t)a->n_slots * a->max_ctx * kv_dim;
    for (int i = 0; i < n_seq; i++) {
        T += n_tok[i];
        max_ntok = n_tok[i] > max_ntok ? n_tok[i] : max_ntok;
    }
    float *kc = s_alloc(cache_n), *vc = s_alloc(cache_n), *q = s_alloc((size_t)T * q_dim);
    float *want = s_alloc((size_t)T * q_dim), *got = s_alloc((size_t)T * q_dim);
    pt_fill(kc, cache_n, t->seed, 50, -1.0f, 1.0f);
    pt_fill(vc, cache_n, t->seed, 51, -1.0f, 1.0f);
    pt_fill(q, (size_t)T * q_dim, t->seed, 52, -4.0f, 4.0f); /* peaky softmax */
    pt_round(kc, cache_n, a->kv_dt);
    pt_round(vc, cache_n, a->kv_dt);

    int32_t meta[4 * 16];
    int off = 0, max_len = 0;
    float *scores = s_alloc((size_t)PL_CPU_ATT_ROWS * a->max_ctx);
    for (int i = 0; i < n_seq; i++) {
        meta[i] = slot[i];
        meta[16 + i] = pos0[i];
        meta[32 + i] = n_tok[i];
        meta[48 + i] = off;
        size_t sb = (size_t)slot[i] * a->max_ctx * kv_dim;
        pl_cpu_attention(q + (size_t)off * q_dim, n_tok[i], pos0[i], kc + sb, vc + sb, a->nh,
                         a->nkv, a->hd, scores, want + (size_t)off * q_dim);
        off += n_tok[i];
        max_len = pos0[i] + n_tok[i] > max_len ? pos0[i] + n_tok[i] : max_len;
    }
    void *kc_dt = pt_to_dtype(kc, cache_n, a->kv_dt), *vc_dt = pt_to_dtype(vc, cache_n, a->kv_dt);
    size_t ks = pl_dtype_size(a->kv_dt), os = pl_dtype_size(a->out_dt);
    void *d_k = pt_dev_upload(kc_dt, cache_n * ks), *d_v = pt_dev_upload(vc_dt, cache_n * ks);
    float *d_q = pt_dev_upload(q, (size_t)T * q_dim * 4);
    int32_t *d_meta = pt_dev_upload(meta, sizeof(meta));
    void *d_out = pt_dev_alloc((size_t)T * q_dim * os);
    cudaMemset(d_out, 0, (size_t)T * q_dim * os);
    pl_gpu_attn_args_t args = {.q = d_q,
                               .q_stride = q_dim,
                               .k_cache = d_k,
                               .v_cache = d_v,
                               .kv_dt = a->kv_dt,
                               .max_ctx = a->max_ctx,
                               .n_heads = a->nh,
                               .n_kv = a->nkv,
                               .head_dim = a->hd,
                               .scale = 1.0f / sqrtf((float)a->hd),
                               .n_seq = n_seq,
                               .seq_slot = d_meta,
                               .seq_pos0 = d_meta + 16,
                               .seq_ntok = d_meta + 32,
                               .seq_off = d_meta + 48,
                               .out = d_out,
                               .out_dt = a->out_dt,
                               .out_stride = q_dim};
    char what[160];
    int splits = 0, chunk = 0;
    if (decode) {
        pl_gpu_decode_split(a->max_ctx, n_seq, a->nh, &splits, &chunk);
        if (force_splits > 0) {
            splits = force_splits;
            chunk = (a->max_ctx + splits - 1) / splits;
        }
        float *d_work = pt_dev_alloc((size_t)n_seq * a->nh * splits * (a->hd + 2) * 4);
        pt_dev_sync("decode attention", pl_gpu_attn_decode(&args, splits, chunk, d_work, 0));
        cudaFree(d_work);
    } else {
        pt_dev_sync("prefill attention", pl_gpu_attn_prefill(&args, max_ntok, 0));
    }
    void *raw = malloc((size_t)T * q_dim * os);
    pt_dev_download(raw, d_out, (size_t)T * q_dim * os);
    pt_from_dtype(raw, (size_t)T * q_dim, a->out_dt, got);
    pt_round(want, (size_t)T * q_dim, a->out_dt);
    snprintf(what, sizeof(what), "%s h=%d/%d hd=%d kv=%s out=%s seqs=%d len<=%d splits=%d",
             decode ? "attn decode" : "attn prefill", a->nh, a->nkv, a->hd, pl_dtype_name(a->kv_dt),
             pl_dtype_name(a->out_dt), n_seq, max_len, splits);
    pt_compare(t, what, got, want, (size_t)T * q_dim, s_tol(a->out_dt, 2e-5));

    free(raw);
    cudaFree(d_out);
    cudaFree(d_meta);
    cudaFree(d_q);
    cudaFree(d_v);
    cudaFree(d_k);
    free(vc_dt);
    free(kc_dt);
    free(scores);
    free(got);
    free(want);
    free(q);
    free(vc);
    free(kc);
}

static void s_attention_all(pt_ctx_t *t)
{
    const s_att_cfg_t cfgs[] = {
        {8, 2, 64, 2048, 5, PL_DT_F32, PL_DT_F32},   {8, 2, 64, 2048, 5, PL_DT_BF16, PL_DT_BF16},
        {4, 4, 128, 2048, 5, PL_DT_F16, PL_DT_F32},  {8, 1, 256, 2048, 5, PL_DT_F32, PL_DT_F32},
        {4, 2, 128, 2048, 5, PL_DT_BF16, PL_DT_F32}, {6, 2, 96, 2048, 5, PL_DT_F32, PL_DT_F16},
    };
    const int d_slot[] = {3, 0, 2, 1}, d_pos0[] = {0, 16, 299, 1999}, d_ntok[] = {1, 1, 1, 1};
    const int p_slot[] = {1, 3, 0, 2, 4}, p_pos0[] = {0, 5, 100, 0, 1000};
    const int p_ntok[] = {37, 16, 1, 1, 70};
    for (size_t c = 0; c < sizeof(cfgs) / sizeof(cfgs[0]); c++) {
        s_attention(t, &cfgs[c], 4, d_slot, d_pos0, d_ntok, true, 0);
        s_attention(t, &cfgs[c], 5, p_slot, p_pos0, p_ntok, false, 0);
    }
    /* split extremes: one block per head, and many short chunks */
    s_attention(t, &cfgs[0], 4, d_slot, d_pos0, d_ntok, true, 1);
    s_attention(t, &cfgs[0], 4, d_slot, d_pos0, d_ntok, true, 64);
    /* the prefill kernel on a decode-only batch (mixed batches take this path) */
    s_attention(t, &cfgs[4], 4, d_slot, d_pos0, d_ntok, false, 0);
    /* a prefill into a fresh slot that is also the only sequence */
    const int one_slot[] = {2}, one_pos0[] = {0}, one_ntok[] = {513};
    s_attention(t, &cfgs[2], 1, one_slot, one_pos0, one_ntok, false, 0);
}

/* ---- GEMM ---- */

static void s_gemm_case(pt_ctx_t *t, pl_gpu_blas_t *blas, int m, int k, int n, pl_dtype_t w_dt,
                        bool acc)
{
    bool vendor = pl_gpu_blas_vendor(blas);
    pl_dtype_t x_dt = vendor ? w_dt : PL_DT_F32;
    float *x = s_alloc((size_t)m * k), *w = s_alloc((size_t)n * k), *y0 = s_alloc((size_t)m * n);
    float *want = s_alloc((size_t)m * n), *got = s_alloc((size_t)m * n);
    pt_fill(x, (size_t)m * k, t->seed, 60 + (uint64_t)k, -1.0f, 1.0f);
    pt_fill(w, (size_t)n * k, t->seed, 61 + (uint64_t)n, -1.0f, 1.0f);
    pt_fill(y0, (size_t)m * n, t->seed, 62, -1.0f, 1.0f);
    pt_round(w, (size_t)n * k, w_dt);
    pt_round(x, (size_t)m * k, x_dt);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = acc ? y0[(size_t)i * n + j] : 0.0;
            for (int l = 0; l < k; l++)
                s += (double)x[(size_t)i * k + l] * w[(size_t)j * k + l];
            want[(size_t)i * n + j] = (float)s;
        }
    void *x_h = pt_to_dtype(x, (size_t)m * k, x_dt), *w_h = pt_to_dtype(w, (size_t)n * k, w_dt);
    void *d_x = pt_dev_upload(x_h, (size_t)m * k * pl_dtype_size(x_dt));
    void *d_w = pt_dev_upload(w_h, (size_t)n * k * pl_dtype_size(w_dt));
    float *d_y = pt_dev_upload(y0, (size_t)m * n * 4);
    pl_status_t st = pl_gpu_gemm(blas, d_x, x_dt, m, k, d_w, w_dt, n, d_y, acc);
    pt_dev_sync("gemm", cudaGetLastError());
    char what[128];
    snprintf(what, sizeof(what), "gemm %s m=%d k=%d n=%d w=%s%s", vendor ? "vendor" : "builtin", m,
             k, n, pl_dtype_name(w_dt), acc ? " +=" : "");
    if (pt_check(t, st == PL_OK, "%s: status %s", what, st ? pl_error_msg() : "ok")) {
        pt_dev_download(got, d_y, (size_t)m * n * 4);
        /* f32 sums of k products in another order: relative to sqrt(k) */
        pt_compare(t, what, got, want, (size_t)m * n, 2e-6 * sqrt((double)k) + 1e-6);
    }
    cudaFree(d_y);
    cudaFree(d_w);
    cudaFree(d_x);
    free(w_h);
    free(x_h);
    free(got);
    free(want);
    free(y0);
    free(w);
    free(x);
}

static void s_gemm(pt_ctx_t *t)
{
    const int shapes[][3] = {{1, 64, 33},     {3, 100, 300}, {8, 1000, 257}, {9, 64, 64},
                             {70, 1000, 300}, {130, 72, 1},  {1, 4096, 512}};
    for (int v = 0; v < 2; v++) {
        pl_gpu_blas_t *blas = NULL;
        if (pl_gpu_blas_create(0, v == 1, &blas) != PL_OK) {
            pt_check(t, false, "gemm context: %s", pl_error_msg());
            continue;
        }
        if (v == 1 && !pl_gpu_blas_vendor(blas)) {
            pt_skip(t, "vendor gemm: %s", pl_gpu_blas_desc(blas));
            pl_gpu_blas_destroy(&blas);
            continue;
        }
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
            for (size_t d = 0; d < 3; d++)
                s_gemm_case(t, blas, shapes[s][0], shapes[s][1], shapes[s][2], s_dts[d], s % 2);
        pl_gpu_blas_destroy(&blas);
    }
}

static void s_cast(pt_ctx_t *t)
{
    float x[] = {0.0f,
                 -0.0f,
                 1.0f,
                 -2.5f,
                 65504.0f,
                 65520.0f,
                 1e-8f,
                 3.0e-5f,
                 6.1e-5f,
                 1.00390625f /* 1 + 2^-8: bf16 tie */,
                 1.01171875f /* 1 + 3 * 2^-8 */,
                 3.4e38f,
                 -1e-30f,
                 INFINITY,
                 -INFINITY,
                 1.0009765625f /* f16 tie */};
    size_t n = sizeof(x) / sizeof(x[0]);
    float *d_x = pt_dev_upload(x, sizeof(x));
    uint16_t got[32], want[32];
    void *d_out = pt_dev_alloc(n * 2);
    for (int b = 0; b < 2; b++) {
        pl_dtype_t dt = b ? PL_DT_BF16 : PL_DT_F16;
        pt_dev_sync("cast", pl_gpu_cast(d_x, n, d_out, dt, 0));
        pt_dev_download(got, d_out, n * 2);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            want[i] = b ? pl_f32_to_bf16(x[i]) : pl_f32_to_f16(x[i]);
            if (got[i] != want[i]) {
                bad++;
                fprintf(t->log, "  cast %s of %g: 0x%04x, want 0x%04x\n", pl_dtype_name(dt),
                        (double)x[i], got[i], want[i]);
            }
        }
        pt_check(t, bad == 0, "cast f32 -> %s bit-exact (%zu values, %zu differ)",
                 pl_dtype_name(dt), n, bad);
    }
    cudaFree(d_out);
    cudaFree(d_x);
}

static void s_read(pt_ctx_t *t)
{
    size_t n = (size_t)1 << 22;
    float *ones = s_alloc(n), sink[4096];
    for (size_t i = 0; i < n; i++)
        ones[i] = 1.0f;
    float *d_x = pt_dev_upload(ones, n * 4), *d_sink = pt_dev_alloc(4096 * 4);
    int blocks = pl_gpu_read_blocks();
    pt_dev_sync("read", pl_gpu_read_sum(d_x, n, d_sink, 0));
    pt_dev_download(sink, d_sink, (size_t)blocks * 4);
    double sum = 0.0;
    for (int i = 0; i < blocks; i++)
        sum += sink[i];
    pt_check(t, sum == (double)n, "read-bandwidth kernel sums %zu ones: %.0f", n, sum);
    cudaFree(d_sink);
    cudaFree(d_x);
    free(ones);
}

void pt_ops_run(pt_ctx_t *t)
{
    fprintf(t->log, "# per-op parity (%s kernels vs scalar / CPU-backend references)\n",
            PL_GPU_BACKEND);
    s_embed(t);
    s_rmsnorm(t);
    s_rope(t);
    s_swiglu(t);
    s_attention_all(t);
    s_gemm(t);
    s_cast(t);
    s_read(t);
}
