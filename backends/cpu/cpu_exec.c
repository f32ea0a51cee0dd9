/* The CPU executor: keeps a stage's weight matrices as stored in the mapping (norms and biases
 * as f32), keeps its KV cache, runs microbatches through the kernels of cpu_ops.c and
 * cpu_gemm.c. Also the CPU backend's function table. */
#include "backends/backend_impl.h"
#include "backends/cpu/cpu_dev.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_wcopy.h"

#include "common/log.h"
#include "common/sgemm_rows.h"
#include "common/util.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* S_SGEMM_MIN_TOKENS: common/sgemm_rows.h, which the planner models too */
#define S_SGEMM_MIN_TOKENS PL_SGEMM_MIN_TOKENS

typedef struct {
    const float *attn_norm, *ffn_norm;
    const float *bq, *bk, *bv;     /* q/k/v biases (Qwen2), else NULL */
    const float *q_norm, *k_norm;  /* per-head RMSNorm weights (Qwen3), else NULL */
    pl_cpu_wmat_t wq, wk, wv, wo, w_gate, w_up, w_down;
} s_layer_t;

/* 1-D tensors a layer converts to f32: two norms, three biases, two head norms. */
#define S_OWNED_PER_LAYER 7

typedef struct {
    pl_cpu_dev_t *dev;
    pl_model_config_t cfg;
    pl_be_stage_params_t p;
    int n_layers;
    int q_dim, kv_dim;
    s_layer_t *layers;
    pl_cpu_wmat_t embed, head;
    pl_cpu_wcopy_t wcopy; /* the matrices above, out of the mapping (empty: in the mapping) */
    const float *norm;
    float **owned; /* converted tensors this stage must free */
    int n_owned, max_owned;
    float *kv;     /* [n_layers][K, V][max_seqs][max_ctx][kv_dim] */
    int *slot_len; /* positions 0..slot_len-1 of a slot are in the cache */
    unsigned char *seen;
    double *inv_freq;
    /* scratch for max_tokens tokens */
    float *x, *xn, *q, *k, *v, *att, *gate, *up, *scores, *cos_tab, *sin_tab;
    float *tile; /* PL_CPU_TILE_ROWS weight rows as f32, for long sequences' sgemm */
    int *pos;
    int *short_rows, n_short; /* this call's rows of sequences shorter than S_SGEMM_MIN_TOKENS */
    int *head_rows;           /* 0, 1, 2, ...: the gathered last tokens */
    pl_cpu_att_row_t *att_rows; /* this call's query rows, for attention on the pool */
} s_stage_t;

/* *acc *= v, or false when it would overflow. */
static bool s_mul(size_t *acc, size_t v)
{
    if (v != 0 && *acc > SIZE_MAX / v)
        return false;
    *acc *= v;
    return true;
}

/* *acc += v, or false when it would overflow. */
static bool s_add(size_t *acc, size_t v)
{
    if (*acc > SIZE_MAX - v)
        return false;
    *acc += v;
    return true;
}

static pl_status_t s_tensor(s_stage_t *s, pl_model_t *model, const char *name, int ndim, int64_t d0,
                            int64_t d1, const float **data_p)
{
    int64_t shape[2] = {d0, d1};
    float *data;
    bool owned;
    pl_status_t st = pl_model_tensor_f32(model, name, ndim, shape, &data, &owned);

    if (st)
        return st;
    if (owned) {
        if (s->n_owned >= s->max_owned) {
            free(data);
            return pl_error(PL_ERR_INVALID, "cpu stage: more tensors than expected at %s", name);
        }
        s->owned[s->n_owned++] = data;
    }
    *data_p = data;
    return PL_OK;
}

/* A weight matrix as stored: a typed view into the mapping, no copy. */
static pl_status_t s_matrix(pl_model_t *model, const char *name, int64_t d0, int64_t d1,
                            pl_cpu_wmat_t *m_p)
{
    int64_t shape[2] = {d0, d1};
    pl_tensor_view_t v;
    pl_status_t st = pl_model_tensor_shaped(model, name, 2, shape, &v);
    return st ? st : pl_cpu_wmat_from_view(name, &v, m_p);
}

/* Every matrix of the stage into anonymous huge-page memory, float ones packed (cpu_wcopy.h). */
static pl_status_t s_copy_weights(s_stage_t *s)
{
    int n = 7 * s->n_layers + 2;
    pl_cpu_wmat_t **mats = calloc((size_t)n, sizeof(*mats));
    pl_status_t st;

    if (!mats)
        return pl_error(PL_ERR_NOMEM, "cpu stage: out of memory");
    for (int l = 0; l < s->n_layers; l++) {
        s_layer_t *L = &s->layers[l];
        pl_cpu_wmat_t *m[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        memcpy(mats + 7 * l, m, sizeof(m));
    }
    mats[n - 2] = &s->embed;
    mats[n - 1] = &s->head;
    st = pl_cpu_wcopy_make(mats, n, pl_cpu_wcopy_pack_wanted(), &s->wcopy);
    free(mats);
    return st;
}

static pl_status_t s_load_layer(s_stage_t *s, pl_model_t *model, int layer, s_layer_t *L)
{
    const pl_model_config_t *c = &s->cfg;
    char name[128];
    pl_status_t st;
#define S_NAME(suffix, kind)                                                                       \
    snprintf(name, sizeof(name), "model.layers.%d.%s.%s", layer, suffix, kind)
#define S_VEC(field, suffix, kind, d0)                                                             \
    do {                                                                                           \
        S_NAME(suffix, kind);                                                                      \
        if ((st = s_tensor(s, model, name, 1, d0, 0, &L->field)) != PL_OK)                         \
            return st;                                                                             \
    } while (0)
#define S_MAT(field, suffix, d0, d1)                                                               \
    do {                                                                                           \
        S_NAME(suffix, "weight");                                                                  \
        if ((st = s_matrix(model, name, d0, d1, &L->field)) != PL_OK)                              \
            return st;                                                                             \
    } while (0)
    S_VEC(attn_norm, "input_layernorm", "weight", c->hidden);
    S_MAT(wq, "self_attn.q_proj", s->q_dim, c->hidden);
    S_MAT(wk, "self_attn.k_proj", s->kv_dim, c->hidden);
    S_MAT(wv, "self_attn.v_proj", s->kv_dim, c->hidden);
    S_MAT(wo, "self_attn.o_proj", c->hidden, s->q_dim);
    S_VEC(ffn_norm, "post_attention_layernorm", "weight", c->hidden);
    S_MAT(w_gate, "mlp.gate_proj", c->intermediate, c->hidden);
    S_MAT(w_up, "mlp.up_proj", c->intermediate, c->hidden);
    S_MAT(w_down, "mlp.down_proj", c->hidden, c->intermediate);
    if (c->qkv_bias) {
        S_VEC(bq, "self_attn.q_proj", "bias", s->q_dim);
        S_VEC(bk, "self_attn.k_proj", "bias", s->kv_dim);
        S_VEC(bv, "self_attn.v_proj", "bias", s->kv_dim);
    }
    if (c->qk_norm) {
        S_VEC(q_norm, "self_attn.q_norm", "weight", c->head_dim);
        S_VEC(k_norm, "self_attn.k_norm", "weight", c->head_dim);
    }
#undef S_MAT
#undef S_VEC
#undef S_NAME
    return PL_OK;
}

static pl_status_t s_check_params(const pl_model_config_t *c, const pl_be_stage_params_t *p)
{
    if (p->last_layer >= p->first_layer && (p->first_layer < 0 || p->last_layer >= c->n_layers))
        return pl_error(PL_ERR_RANGE, "cpu stage: layers %d..%d outside the model's 0..%d",
                        p->first_layer, p->last_layer, c->n_layers - 1);
    if (p->max_seqs < 1 || p->max_ctx < 1 || p->max_tokens < 1)
        return pl_error(PL_ERR_INVALID,
                        "cpu stage: max_seqs %d, max_ctx %d, max_tokens %d must be positive",
                        p->max_seqs, p->max_ctx, p->max_tokens);
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0 || c->head_dim < 2 ||
        c->head_dim % 2 != 0 || c->hidden < 1 || c->intermediate < 1 || c->vocab < 1)
        return pl_error(PL_ERR_UNSUPPORTED,
                        "cpu stage: unsupported shape (heads %d, kv heads %d, head_dim %d)",
                        c->n_heads, c->n_kv_heads, c->head_dim);
    if (c->sliding_window > 0 && p->max_ctx > c->sliding_window)
        return pl_error(PL_ERR_UNSUPPORTED,
                        "cpu stage: max_ctx %d is past the model's sliding window of %d "
                        "positions; sliding-window attention is not implemented",
                        p->max_ctx, c->sliding_window);
    return PL_OK;
}

#define S_N_SCRATCH 11

/* Allocate the KV cache and scratch; fails with the number of bytes they need. */
static pl_status_t s_alloc(s_stage_t *s)
{
    const pl_model_config_t *c = &s->cfg;
    size_t T = (size_t)s->p.max_tokens, half = (size_t)c->head_dim / 2;
    float **bufs[S_N_SCRATCH] = {&s->x,    &s->xn, &s->q,      &s->k,       &s->v,      &s->att,
                                 &s->gate, &s->up, &s->scores, &s->cos_tab, &s->sin_tab};
    /* the attention GEMM's score rows, a block of them per thread */
    size_t att = (size_t)PL_CPU_ATT_ROWS * pl_cpu_pool_size(s->dev->pool);
    /* rows x floats per row of each buffer */
    size_t dims[S_N_SCRATCH][2] = {{T, (size_t)c->hidden},
                                   {T, (size_t)c->hidden},
                                   {T, (size_t)s->q_dim},
                                   {T, (size_t)s->kv_dim},
                                   {T, (size_t)s->kv_dim},
                                   {T, (size_t)s->q_dim},
                                   {T, (size_t)c->intermediate},
                                   {T, (size_t)c->intermediate},
                                   {att, (size_t)s->p.max_ctx},
                                   {T, half},
                                   {T, half}};
    size_t sizes[S_N_SCRATCH], kv = sizeof(float), scratch = 0;
    uint64_t avail = 0;
    bool ok = s_mul(&kv, (size_t)s->n_layers) && s_mul(&kv, 2) &&
              s_mul(&kv, (size_t)s->p.max_seqs) && s_mul(&kv, (size_t)s->p.max_ctx) &&
              s_mul(&kv, (size_t)s->kv_dim);

    for (int i = 0; i < S_N_SCRATCH && ok; i++) {
        sizes[i] = sizeof(float);
        ok = s_mul(&sizes[i], dims[i][0]) && s_mul(&sizes[i], dims[i][1]) &&
             s_add(&scratch, sizes[i]);
    }
    if (!ok || kv > SIZE_MAX - scratch)
        return pl_error(PL_ERR_NOMEM,
                        "cpu stage: kv cache and scratch size overflows (%d seqs x "
                        "%d positions, %d tokens)",
                        s->p.max_seqs, s->p.max_ctx, s->p.max_tokens);
    if (pl_cpu_mem_available(&avail) == PL_OK && kv + scratch > avail)
        return pl_error(PL_ERR_NOMEM,
                        "cpu stage: kv cache (%zu bytes) and scratch (%zu bytes) "
                        "need %zu bytes, only %llu available",
                        kv, scratch, kv + scratch, (unsigned long long)avail);
    pl_error_clear();
    s->kv = calloc(1, kv ? kv : 1); /* pages are zeroed and committed lazily */
    if (!s->kv)
        return pl_error(PL_ERR_NOMEM, "cpu stage: kv cache needs %zu bytes", kv);
    for (int i = 0; i < S_N_SCRATCH; i++) {
        *bufs[i] = malloc(sizes[i] ? sizes[i] : 1);
        if (!*bufs[i])
            return pl_error(PL_ERR_NOMEM, "cpu stage: scratch needs %zu bytes", scratch);
    }
    s->pos = malloc(T * sizeof(int));
    s->short_rows = malloc(T * sizeof(int));
    s->head_rows = malloc(T * sizeof(int));
    s->att_rows = malloc((size_t)s->p.max_tokens * sizeof(*s->att_rows));
    s->slot_len = calloc((size_t)s->p.max_seqs, sizeof(int));
    s->seen = calloc((size_t)s->p.max_seqs, 1);
    s->inv_freq = malloc(PL_MAX(half, 1) * sizeof(double));
    if (!s->pos || !s->short_rows || !s->head_rows || !s->att_rows || !s->slot_len ||
        !s->seen || !s->inv_freq)
        return pl_error(PL_ERR_NOMEM, "cpu stage: out of memory");
    for (size_t i = 0; i < T; i++)
        s->head_rows[i] = (int)i;
    return PL_OK;
}

pl_status_t pl_cpu_stage_load(void *dev, pl_model_t *model, const pl_be_stage_params_t *params,
                              void **stage_p)
{
    s_stage_t *s = calloc(1, sizeof(*s));
    pl_status_t st;

    if (!s)
        return pl_error(PL_ERR_NOMEM, "cpu stage: out of memory");
    s->dev = dev;
    s->cfg = *pl_model_config(model);
    s->p = *params;
    if ((st = s_check_params(&s->cfg, params)) != PL_OK)
        goto err_free;
    s->n_layers = params->last_layer >= params->first_layer
                      ? params->last_layer - params->first_layer + 1
                      : 0;
    s->q_dim = s->cfg.n_heads * s->cfg.head_dim;
    s->kv_dim = s->cfg.n_kv_heads * s->cfg.head_dim;
    s->max_owned = S_OWNED_PER_LAYER * s->n_layers + 1;
    s->owned = calloc((size_t)s->max_owned, sizeof(float *));
    s->layers = calloc((size_t)PL_MAX(s->n_layers, 1), sizeof(s_layer_t));
    if (!s->owned || !s->layers) {
        st = pl_error(PL_ERR_NOMEM, "cpu stage: out of memory");
        goto err_free;
    }
    /* the cache first: a stage that cannot fit fails before reading any weight */
    if ((st = s_alloc(s)) != PL_OK)
        goto err_free;
    for (int l = 0; l < s->n_layers; l++)
        if ((st = s_load_layer(s, model, params->first_layer + l, &s->layers[l])) != PL_OK)
            goto err_free;
    bool tied_head = params->has_head && s->cfg.tie_embeddings;
    if (params->has_embed || tied_head) {
        st = s_matrix(model, "model.embed_tokens.weight", s->cfg.vocab, s->cfg.hidden, &s->embed);
        if (st)
            goto err_free;
    }
    if (params->has_head) {
        st = s_tensor(s, model, "model.norm.weight", 1, s->cfg.hidden, 0, &s->norm);
        if (!st && tied_head)
            s->head = s->embed;
        else if (!st)
            st = s_matrix(model, "lm_head.weight", s->cfg.vocab, s->cfg.hidden, &s->head);
        if (st)
            goto err_free;
    }
    if (pl_cpu_wcopy_wanted() && (st = s_copy_weights(s)) != PL_OK)
        goto err_free;
    /* long sequences' sgemm reads f32 weights in place and converts the others by tiles */
    if (params->max_tokens >= S_SGEMM_MIN_TOKENS) {
        int k = PL_MAX(PL_MAX(s->cfg.hidden, s->q_dim), s->cfg.intermediate);
        int n = pl_cpu_pool_size(s->dev->pool); /* a tile per thread */
        s->tile = malloc((size_t)n * PL_CPU_TILE_ROWS * (size_t)k * sizeof(float));
        if (!s->tile) {
            st = pl_error(PL_ERR_NOMEM, "cpu stage: out of memory for %d %d x %d weight tiles", n,
                          PL_CPU_TILE_ROWS, k);
            goto err_free;
        }
    }
    pl_model_rope_inv_freq(&s->cfg, s->inv_freq);
    pl_log_debug("cpu stage: layers %d..%d loaded, %d slots x %d positions", params->first_layer,
                 params->last_layer, params->max_seqs, params->max_ctx);
    *stage_p = s;
    return PL_OK;

err_free:
    pl_cpu_stage_unload(s);
    return st;
}

/* Check the whole batch before touching any state, so a bad one changes nothing. */
static pl_status_t s_check_batch(s_stage_t *s, const pl_be_batch_t *b, const void *in,
                                 const void *out)
{
    pl_status_t st = PL_OK;
    long sum = 0;
    int i;

    if (!b || !in || !out || !b->slot || !b->pos0 || !b->n_tok)
        return pl_error(PL_ERR_INVALID, "cpu stage: batch, slot, pos0, n_tok, in and out must "
                                        "not be NULL");
    if (b->n_seq < 1 || b->n_seq > s->p.max_seqs)
        return pl_error(PL_ERR_RANGE, "cpu stage: n_seq %d outside 1..%d", b->n_seq, s->p.max_seqs);
    if (b->n_tokens < 1 || b->n_tokens > s->p.max_tokens)
        return pl_error(PL_ERR_RANGE, "cpu stage: n_tokens %d outside 1..%d (max_tokens)",
                        b->n_tokens, s->p.max_tokens);
    for (i = 0; i < b->n_seq && !st; i++) {
        int slot = b->slot[i], pos0 = b->pos0[i], n = b->n_tok[i];
        if (slot < 0 || slot >= s->p.max_seqs)
            st = pl_error(PL_ERR_RANGE, "cpu stage: seq %d: slot %d outside 0..%d", i, slot,
                          s->p.max_seqs - 1);
        else if (s->seen[slot])
            st = pl_error(PL_ERR_INVALID, "cpu stage: seq %d: slot %d used twice in one batch", i,
                          slot);
        else if (n < 1 || n > s->p.max_tokens)
            st = pl_error(PL_ERR_RANGE, "cpu stage: seq %d: n_tok %d outside 1..%d", i, n,
                          s->p.max_tokens);
        else if (pos0 < 0 || pos0 > s->p.max_ctx - n)
            st = pl_error(PL_ERR_RANGE, "cpu stage: seq %d: positions %d..%d outside max_ctx %d", i,
                          pos0, pos0 + n - 1, s->p.max_ctx);
        else if (pos0 > s->slot_len[slot])
            st = pl_error(PL_ERR_INVALID,
                          "cpu stage: seq %d: pos0 %d but slot %d holds only "
                          "positions 0..%d",
                          i, pos0, slot, s->slot_len[slot] - 1);
        else
            s->seen[slot] = 1;
        sum += n;
    }
    for (int j = 0; j < i; j++) /* every slot marked above was in range */
        if (b->slot[j] >= 0 && b->slot[j] < s->p.max_seqs)
            s->seen[b->slot[j]] = 0;
    if (st)
        return st;
    if (sum != b->n_tokens)
        return pl_error(PL_ERR_INVALID,
                        "cpu stage: n_tokens %d but the sequences' n_tok sum to "
                        "%ld",
                        b->n_tokens, sum);
    if (s->p.has_embed) {
        const int32_t *ids = in;
        for (i = 0; i < b->n_tokens; i++)
            if (ids[i] < 0 || ids[i] >= s->cfg.vocab)
                return pl_error(PL_ERR_RANGE, "cpu stage: token %d: id %d outside vocab 0..%d", i,
                                (int)ids[i], s->cfg.vocab - 1);
    }
    return PL_OK;
}

static float *s_cache(s_stage_t *s, int layer, int which, int slot)
{
    size_t per_slot = (size_t)s->p.max_ctx * (size_t)s->kv_dim;
    size_t idx = (((size_t)layer * 2 + (size_t)which) * (size_t)s->p.max_seqs + (size_t)slot);
    return s->kv + idx * per_slot;
}

/* y[i] = x @ w[i]^T (+ bias[i]) over the batch's rows for n matrices of one input: long
 * sequences one sgemm each, the rest in one job for all n. */
static void s_linear_n(s_stage_t *s, const pl_be_batch_t *b, const float *x,
                       const pl_cpu_wmat_t *const *w, const float *const *bias, float *const *y,
                       int n)
{
    int in_dim = w[0]->cols;
    for (int m = 0; m < n; m++)
        for (int i = 0, t0 = 0; i < b->n_seq; t0 += b->n_tok[i], i++)
            if (b->n_tok[i] >= S_SGEMM_MIN_TOKENS)
                pl_cpu_gemm_seq(s->dev->pool, x + (size_t)t0 * in_dim, b->n_tok[i], w[m], s->tile,
                                y[m] + (size_t)t0 * w[m]->rows);
    pl_cpu_gemm_rows_n(s->dev->pool, x, s->short_rows, s->n_short, w, y, n);
    for (int m = 0; m < n; m++)
        if (bias[m])
            pl_cpu_add_bias(y[m], bias[m], b->n_tokens, w[m]->rows);
}

static void s_linear(s_stage_t *s, const pl_be_batch_t *b, const float *x, const pl_cpu_wmat_t *w,
                     float *y)
{
    const float *none = NULL;
    s_linear_n(s, b, x, &w, &none, &y, 1);
}

/* Attention for every sequence of the call: the one-token ones (decode) in one job on the pool
 * by (row, head), with every row of the others where the weights are packed (a packed stage's
 * prefill rounds alike in chunks of any size, cpu_pack.h, and so must its attention); else the
 * longer ones by sgemm per head, the heads shared out on the pool (the row kernels took 1.7x
 * its time on a 1,024-token prefill, one thread: bench/README.md). */
static void s_attention(s_stage_t *s, int l, const pl_be_batch_t *b)
{
    const pl_model_config_t *c = &s->cfg;
    bool by_row = s->layers[l].wq.packed;
    int n = 0;

    for (int i = 0, t0 = 0; i < b->n_seq; t0 += b->n_tok[i], i++) {
        const float *kc = s_cache(s, l, 0, b->slot[i]), *vc = s_cache(s, l, 1, b->slot[i]);
        size_t at = (size_t)t0 * s->q_dim;
        if (b->n_tok[i] > 1 && !by_row) {
            pl_cpu_attention_seq(s->dev->pool, s->q + at, b->n_tok[i], b->pos0[i], kc, vc,
                                 c->n_heads, c->n_kv_heads, c->head_dim, s->scores, s->att + at);
            continue;
        }
        for (int j = 0; j < b->n_tok[i]; j++, at += (size_t)s->q_dim)
            s->att_rows[n++] = (pl_cpu_att_row_t){
                .q = s->q + at, .k = kc, .v = vc, .out = s->att + at, .pos = b->pos0[i] + j};
    }
    pl_cpu_attention_decode(s->dev->pool, s->att_rows, n, c->n_heads, c->n_kv_heads, c->head_dim,
                            s->scores, s->p.max_ctx);
}

static void s_layer_forward(s_stage_t *s, int l, const pl_be_batch_t *b)
{
    const pl_model_config_t *c = &s->cfg;
    const s_layer_t *L = &s->layers[l];
    int T = b->n_tokens, hd = c->head_dim;

    pl_cpu_rmsnorm(s->x, L->attn_norm, T, c->hidden, c->rms_eps, s->xn);
    const pl_cpu_wmat_t *qkv[3] = {&L->wq, &L->wk, &L->wv};
    const float *qkv_bias[3] = {L->bq, L->bk, L->bv};
    float *qkv_out[3] = {s->q, s->k, s->v};
    s_linear_n(s, b, s->xn, qkv, qkv_bias, qkv_out, 3);
    if (L->q_norm) { /* each head's row of head_dim values, normalised on its own */
        pl_cpu_rmsnorm(s->q, L->q_norm, T * c->n_heads, hd, c->rms_eps, s->q);
        pl_cpu_rmsnorm(s->k, L->k_norm, T * c->n_kv_heads, hd, c->rms_eps, s->k);
    }
    pl_cpu_rope_apply(s->q, T, s->q_dim, c->n_heads, hd, s->cos_tab, s->sin_tab);
    pl_cpu_rope_apply(s->k, T, s->kv_dim, c->n_kv_heads, hd, s->cos_tab, s->sin_tab);
    for (int i = 0, t0 = 0; i < b->n_seq; t0 += b->n_tok[i], i++) {
        float *kc = s_cache(s, l, 0, b->slot[i]), *vc = s_cache(s, l, 1, b->slot[i]);
        size_t row = (size_t)s->kv_dim * sizeof(float);
        memcpy(kc + (size_t)b->pos0[i] * s->kv_dim, s->k + (size_t)t0 * s->kv_dim,
               row * (size_t)b->n_tok[i]);
        memcpy(vc + (size_t)b->pos0[i] * s->kv_dim, s->v + (size_t)t0 * s->kv_dim,
               row * (size_t)b->n_tok[i]);
    }
    s_attention(s, l, b);
    s_linear(s, b, s->att, &L->wo, s->xn);
    pl_cpu_add(s->x, s->xn, (size_t)T * c->hidden);
    pl_cpu_rmsnorm(s->x, L->ffn_norm, T, c->hidden, c->rms_eps, s->xn);
    const pl_cpu_wmat_t *gate_up[2] = {&L->w_gate, &L->w_up};
    const float *no_bias[2] = {NULL, NULL};
    float *gate_up_out[2] = {s->gate, s->up};
    s_linear_n(s, b, s->xn, gate_up, no_bias, gate_up_out, 2);
    pl_cpu_swiglu(s->gate, s->up, (size_t)T * c->intermediate);
    s_linear(s, b, s->gate, &L->w_down, s->xn);
    pl_cpu_add(s->x, s->xn, (size_t)T * c->hidden);
}

pl_status_t pl_cpu_stage_forward(void *stage, const pl_be_batch_t *b, const void *in, void *out)
{
    s_stage_t *s = stage;
    const pl_model_config_t *c = &s->cfg;
    size_t row = (size_t)c->hidden * sizeof(float);
    pl_status_t st = s_check_batch(s, b, in, out);

    if (st)
        return st;
    /* OpenBLAS on one thread (process-wide): the pool splits its products in a fixed way, where
     * OpenBLAS's own threads would split them by their number and round the edges otherwise */
    if (openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);
    if (s->p.has_embed)
        pl_cpu_embed(&s->embed, in, b->n_tokens, s->x);
    else
        memcpy(s->x, in, row * (size_t)b->n_tokens);
    s->n_short = 0;
    for (int i = 0, t = 0; i < b->n_seq; i++) {
        for (int j = 0; j < b->n_tok[i]; j++, t++) {
            s->pos[t] = b->pos0[i] + j;
            if (b->n_tok[i] < S_SGEMM_MIN_TOKENS)
                s->short_rows[s->n_short++] = t;
        }
    }
    if (s->n_layers > 0)
        pl_cpu_rope_table(s->inv_freq, c->head_dim / 2, s->pos, b->n_tokens, s->cos_tab,
                          s->sin_tab);
    for (int l = 0; l < s->n_layers; l++) {
        s_layer_forward(s, l, b);
        if (b->between_layers && l + 1 < s->n_layers)
            b->between_layers(b->between_arg);
    }
    for (int i = 0; i < b->n_seq; i++)
        s->slot_len[b->slot[i]] = b->pos0[i] + b->n_tok[i];
    if (!s->p.has_head) {
        memcpy(out, s->x, row * (size_t)b->n_tokens);
        return PL_OK;
    }
    if (b->no_logits) /* an earlier prefill chunk: its KV is written, nothing is sampled */
        return PL_OK;
    for (int i = 0, t = 0; i < b->n_seq; i++) {
        t += b->n_tok[i];
        memcpy(s->xn + (size_t)i * c->hidden, s->x + (size_t)(t - 1) * c->hidden, row);
    }
    pl_cpu_rmsnorm(s->xn, s->norm, b->n_seq, c->hidden, c->rms_eps, s->xn);
    pl_cpu_gemm_rows(s->dev->pool, s->xn, s->head_rows, b->n_seq, &s->head, out);
    return PL_OK;
}

void pl_cpu_stage_free_seq(void *stage, int slot)
{
    s_stage_t *s = stage;
    if (s && slot >= 0 && slot < s->p.max_seqs)
        s->slot_len[slot] = 0;
}

void pl_cpu_stage_unload(void *stage)
{
    s_stage_t *s = stage;
    if (!s)
        return;
    for (int i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    pl_cpu_wcopy_free(&s->wcopy);
    free(s->layers);
    free(s->kv);
    free(s->x);
    free(s->xn);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->att);
    free(s->gate);
    free(s->up);
    free(s->scores);
    free(s->cos_tab);
    free(s->sin_tab);
    free(s->tile);
    free(s->pos);
    free(s->short_rows);
    free(s->head_rows);
    free(s->att_rows);
    free(s->slot_len);
    free(s->seen);
    free(s->inv_freq);
    free(s);
}

static const pl_be_ops_t s_cpu_ops = {
    .abi_version = PL_BE_ABI_VERSION,
    .name = "cpu",
    .probe = pl_cpu_probe,
    .open = pl_cpu_open,
    .close = pl_cpu_close,
    .calibrate = pl_cpu_calibrate,
    .stage_load = pl_cpu_stage_load,
    .stage_forward = pl_cpu_stage_forward,
    .stage_free_seq = pl_cpu_stage_free_seq,
    .stage_unload = pl_cpu_stage_unload,
};

const pl_be_ops_t *pl_be_cpu_ops(void)
{
    return &s_cpu_ops;
}
