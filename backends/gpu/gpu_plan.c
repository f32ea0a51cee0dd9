/* Host-side planning for the GPU backends: validation of stages and batches, RoPE frequencies,
 * flash-decoding splits, the metadata block and buffer layouts. No GPU API: tests include it. */
#include "backends/gpu/gpu_plan.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

/* the split cap alone keeps decode splits inside the grid's y limit */
_Static_assert(PL_GPU_DECODE_MAX_BLOCKS <= PL_GPU_GRID_MAX_YZ, "decode splits may pass the grid");

pl_status_t pl_gpu_stage_check(const pl_model_config_t *cfg, const pl_be_stage_params_t *p)
{
    if (cfg->hidden <= 0 || cfg->intermediate <= 0 || cfg->n_heads <= 0 || cfg->n_kv_heads <= 0 ||
        cfg->head_dim <= 0 || cfg->vocab <= 0 || cfg->n_layers < 0)
        return pl_error(PL_ERR_INVALID, "model config: non-positive size");
    if (cfg->qkv_bias || cfg->qk_norm)
        return pl_error(PL_ERR_UNSUPPORTED, "%s: the GPU kernels have no %s yet (place this "
                        "stage on a CPU)", pl_model_family_name(cfg->family),
                        cfg->qkv_bias ? "q/k/v biases" : "per-head q/k norms");
    if (cfg->sliding_window > 0 && p->max_ctx > cfg->sliding_window)
        return pl_error(PL_ERR_UNSUPPORTED, "stage: max_ctx %d is past the model's sliding "
                        "window of %d positions; sliding-window attention is not implemented",
                        p->max_ctx, cfg->sliding_window);
    if (cfg->head_dim % 2 || cfg->head_dim > PL_GPU_PLAN_MAX_HEAD_DIM)
        return pl_error(PL_ERR_UNSUPPORTED,
                        "head_dim %d: the GPU kernels need an even head_dim "
                        "of at most %d",
                        cfg->head_dim, PL_GPU_PLAN_MAX_HEAD_DIM);
    if (cfg->n_heads % cfg->n_kv_heads)
        return pl_error(PL_ERR_INVALID,
                        "num_attention_heads %d is not a multiple of "
                        "num_key_value_heads %d",
                        cfg->n_heads, cfg->n_kv_heads);
    if (cfg->rope_scaling == PL_ROPE_LLAMA3 &&
        (cfg->rope_factor <= 0 || cfg->rope_low_freq_factor <= 0 ||
         cfg->rope_high_freq_factor <= cfg->rope_low_freq_factor || cfg->rope_orig_max_pos <= 0))
        return pl_error(PL_ERR_INVALID, "rope_scaling: llama3 factors out of range");
    if (p->last_layer >= p->first_layer && (p->first_layer < 0 || p->last_layer >= cfg->n_layers))
        return pl_error(PL_ERR_RANGE, "stage layers %d..%d outside the model's 0..%d",
                        p->first_layer, p->last_layer, cfg->n_layers - 1);
    if (p->max_seqs <= 0 || p->max_ctx <= 0 || p->max_tokens <= 0)
        return pl_error(PL_ERR_RANGE,
                        "stage: max_seqs %d, max_ctx %d, max_tokens %d must be "
                        "positive",
                        p->max_seqs, p->max_ctx, p->max_tokens);
    if (p->max_seqs > PL_GPU_MAX_SEQS)
        return pl_error(PL_ERR_RANGE,
                        "stage: max_seqs %d above %d, the GPU attention grids' sequence limit",
                        p->max_seqs, PL_GPU_MAX_SEQS);
    if (p->max_tokens > PL_GPU_MAX_TOKENS)
        return pl_error(PL_ERR_RANGE,
                        "stage: max_tokens %d above %d, the GPU GEMM grid's limit (%d tiles of 64)",
                        p->max_tokens, PL_GPU_MAX_TOKENS, PL_GPU_GRID_MAX_YZ);
    if (p->max_ctx > (1 << 24))
        return pl_error(PL_ERR_RANGE, "stage: max_ctx %d above %d", p->max_ctx, 1 << 24);
    if (cfg->n_heads > PL_GPU_GRID_MAX_YZ)
        return pl_error(PL_ERR_UNSUPPORTED,
                        "num_attention_heads %d above %d, the GPU attention grids' limit",
                        cfg->n_heads, PL_GPU_GRID_MAX_YZ);
    /* one sequence gets the most splits */
    int splits = 0, chunk = 0;
    pl_gpu_decode_split(p->max_ctx, 1, cfg->n_heads, &splits, &chunk);
    if (splits > PL_GPU_GRID_MAX_YZ)
        return pl_error(PL_ERR_RANGE, "stage: max_ctx %d needs %d decode splits, above %d",
                        p->max_ctx, splits, PL_GPU_GRID_MAX_YZ);
    /* GEMM dimensions and element offsets inside one row are ints */
    int64_t qkv = (int64_t)(cfg->n_heads + 2 * cfg->n_kv_heads) * cfg->head_dim;
    if (qkv > INT32_MAX / 2 || 2 * (int64_t)cfg->intermediate > INT32_MAX / 2 ||
        (int64_t)cfg->hidden * cfg->vocab > INT64_MAX / 8)
        return pl_error(PL_ERR_RANGE, "model dimensions too large for the GPU kernels");
    return PL_OK;
}

pl_status_t pl_gpu_batch_check(const pl_be_batch_t *b, int max_seqs, int max_ctx, int max_tokens)
{
    if (!b || !b->slot || !b->pos0 || !b->n_tok)
        return pl_error(PL_ERR_INVALID, "batch: missing slot, pos0 or n_tok array");
    if (b->n_seq <= 0 || b->n_seq > max_seqs)
        return pl_error(PL_ERR_RANGE, "batch: n_seq %d outside 1..%d", b->n_seq, max_seqs);
    if (b->n_tokens <= 0 || b->n_tokens > max_tokens)
        return pl_error(PL_ERR_RANGE, "batch: n_tokens %d outside 1..%d", b->n_tokens, max_tokens);
    int64_t sum = 0;
    for (int i = 0; i < b->n_seq; i++) {
        int slot = b->slot[i], pos0 = b->pos0[i], n = b->n_tok[i];
        if (slot < 0 || slot >= max_seqs)
            return pl_error(PL_ERR_RANGE, "batch: sequence %d: slot %d outside 0..%d", i, slot,
                            max_seqs - 1);
        if (n <= 0)
            return pl_error(PL_ERR_RANGE, "batch: sequence %d: n_tok %d is not positive", i, n);
        if (pos0 < 0 || (int64_t)pos0 + n > max_ctx)
            return pl_error(PL_ERR_RANGE,
                            "batch: sequence %d: positions %d..%lld outside the "
                            "context of %d",
                            i, pos0, (long long)pos0 + n - 1, max_ctx);
        for (int j = 0; j < i; j++)
            if (b->slot[j] == slot)
                return pl_error(PL_ERR_INVALID, "batch: sequences %d and %d share slot %d", j, i,
                                slot);
        sum += n;
    }
    if (sum != b->n_tokens)
        return pl_error(PL_ERR_INVALID, "batch: n_tok sums to %lld, n_tokens is %d", (long long)sum,
                        b->n_tokens);
    return PL_OK;
}

void pl_gpu_decode_split(int max_ctx, int n_seq, int n_heads, int *splits_p, int *chunk_p)
{
    int splits = (max_ctx + PL_GPU_DECODE_MIN_CHUNK - 1) / PL_GPU_DECODE_MIN_CHUNK;
    int64_t pairs = (int64_t)(n_seq > 0 ? n_seq : 1) * (n_heads > 0 ? n_heads : 1);
    int64_t cap = PL_GPU_DECODE_MAX_BLOCKS / pairs;
    if (cap < 1)
        cap = 1;
    if (splits > cap)
        splits = (int)cap;
    if (splits < 1)
        splits = 1;
    *splits_p = splits;
    *chunk_p = (max_ctx + splits - 1) / splits;
}

size_t pl_gpu_decode_work_floats(int max_ctx, int max_seqs, int n_heads, int head_dim)
{
    /* blocks(n) = n * heads * splits(n) is at most the cap while splits is capped, n * heads
     * when the cap drops below one split, and never more than with every split uncapped */
    size_t s0 = ((size_t)max_ctx + PL_GPU_DECODE_MIN_CHUNK - 1) / PL_GPU_DECODE_MIN_CHUNK;
    size_t pairs = (size_t)max_seqs * (size_t)n_heads;
    size_t most = pairs > PL_GPU_DECODE_MAX_BLOCKS ? pairs : PL_GPU_DECODE_MAX_BLOCKS;
    if (pairs * (s0 ? s0 : 1) < most)
        most = pairs * (s0 ? s0 : 1);
    return most * ((size_t)head_dim + 2);
}

int pl_gpu_gemv_cols(int threads, int warp_size)
{
    if ((warp_size == 32 || warp_size == 64) && threads >= warp_size && threads % warp_size == 0)
        return threads / warp_size;
    return threads >= 64 ? threads / 64 : 1;
}

size_t pl_gpu_meta_capacity(int max_tokens, int max_seqs)
{
    return 3 * (size_t)max_tokens + 5 * (size_t)max_seqs;
}

pl_status_t pl_gpu_meta_fill(const pl_be_batch_t *b, const int32_t *ids, int32_t *meta, size_t cap,
                             pl_gpu_meta_t *layout)
{
    pl_gpu_meta_t l;
    memset(&l, 0, sizeof(l));
    l.n_tokens = b->n_tokens;
    l.n_seq = b->n_seq;
    l.tok_id = 0;
    l.tok_pos = (size_t)b->n_tokens;
    l.tok_slot = 2 * (size_t)b->n_tokens;
    l.seq_slot = 3 * (size_t)b->n_tokens;
    l.seq_pos0 = l.seq_slot + (size_t)b->n_seq;
    l.seq_ntok = l.seq_pos0 + (size_t)b->n_seq;
    l.seq_off = l.seq_ntok + (size_t)b->n_seq;
    l.last_row = l.seq_off + (size_t)b->n_seq;
    l.count = l.last_row + (size_t)b->n_seq;
    if (l.count > cap)
        return pl_error(PL_ERR_RANGE, "batch: metadata of %zu entries exceeds %zu", l.count, cap);

    int t = 0;
    l.decode = true;
    for (int i = 0; i < b->n_seq; i++) {
        int n = b->n_tok[i];
        meta[l.seq_slot + i] = b->slot[i];
        meta[l.seq_pos0 + i] = b->pos0[i];
        meta[l.seq_ntok + i] = n;
        meta[l.seq_off + i] = t;
        meta[l.last_row + i] = t + n - 1;
        if (n > l.max_ntok)
            l.max_ntok = n;
        if (n != 1)
            l.decode = false;
        for (int j = 0; j < n; j++, t++) {
            meta[l.tok_id + t] = ids ? ids[t] : 0;
            meta[l.tok_pos + t] = b->pos0[i] + j;
            meta[l.tok_slot + t] = b->slot[i];
        }
    }
    *layout = l;
    return PL_OK;
}

#define S_MAX_BYTES ((uint64_t)1 << 50) /* no device holds a petabyte: larger is a bad config */

/* Append `bytes` at the next aligned offset of *end; false on overflow. */
static bool s_take(size_t *end, uint64_t bytes, size_t *off)
{
    uint64_t start =
        ((uint64_t)*end + PL_GPU_PLAN_ALIGN - 1) / PL_GPU_PLAN_ALIGN * PL_GPU_PLAN_ALIGN;
    if (bytes > SIZE_MAX - start || start + bytes > S_MAX_BYTES)
        return false;
    *off = (size_t)start;
    *end = (size_t)(start + bytes);
    return true;
}

static size_t s_max3(size_t a, size_t b, size_t c)
{
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

pl_status_t pl_gpu_layout(const pl_model_config_t *cfg, const pl_be_stage_params_t *p,
                          pl_dtype_t w_dt, pl_dtype_t act_dt, pl_dtype_t kv_dt,
                          pl_gpu_layout_t *out)
{
    pl_gpu_layout_t l;
    memset(&l, 0, sizeof(l));
    uint64_t T = (uint64_t)p->max_tokens, S = (uint64_t)p->max_seqs;
    uint64_t H = (uint64_t)cfg->hidden, I = (uint64_t)cfg->intermediate;
    uint64_t hd = (uint64_t)cfg->head_dim, V = (uint64_t)cfg->vocab;
    uint64_t q_dim = (uint64_t)cfg->n_heads * hd, kv_dim = (uint64_t)cfg->n_kv_heads * hd;
    uint64_t qkv = q_dim + 2 * kv_dim;
    uint64_t ws = pl_dtype_size(w_dt), as = pl_dtype_size(act_dt), ks = pl_dtype_size(kv_dt);
    int n_layers = p->last_layer >= p->first_layer ? p->last_layer - p->first_layer + 1 : 0;
    size_t end = 0;
    bool ok = true;

    ok = ok && s_take(&end, T * H * 4, &l.resid);
    ok = ok && s_take(&end, T * s_max3(H, q_dim, I) * as, &l.xa);
    ok = ok && s_take(&end, T * (qkv > 2 * I ? qkv : 2 * I) * 4, &l.fb);
    ok = ok && s_take(&end, T * (hd / 2) * 4, &l.cos_tab);
    ok = ok && s_take(&end, T * (hd / 2) * 4, &l.sin_tab);
    ok = ok && s_take(&end, (hd / 2) * 8, &l.inv_freq);
    ok = ok && s_take(&end,
                      (uint64_t)pl_gpu_decode_work_floats(p->max_ctx, p->max_seqs, cfg->n_heads,
                                                          cfg->head_dim) *
                          4,
                      &l.work);
    ok = ok && s_take(&end, p->has_head ? S * H * as : 0, &l.xh);
    ok = ok && s_take(&end, p->has_head ? S * V * 4 : 0, &l.logits);
    ok = ok && s_take(&end, pl_gpu_meta_capacity(p->max_tokens, p->max_seqs) * 4, &l.meta);
    l.dev_bytes = end;

    end = 0;
    uint64_t out_floats = p->has_head ? S * V : 0;
    if (T * H > out_floats)
        out_floats = T * H;
    ok = ok && s_take(&end, pl_gpu_meta_capacity(p->max_tokens, p->max_seqs) * 4, &l.h_meta);
    ok = ok && s_take(&end, T * H * 4, &l.h_in);
    ok = ok && s_take(&end, out_floats * 4, &l.h_out);
    l.host_bytes = end;
    if (!ok)
        return pl_error(PL_ERR_RANGE, "stage buffers too large (max_tokens %d, max_seqs %d)",
                        p->max_tokens, p->max_seqs);

    /* KV cache: per layer K and V of [max_seqs][max_ctx][kv_dim] */
    long double kv = (long double)n_layers * 2 * S * (uint64_t)p->max_ctx * kv_dim * ks;
    long double per_layer =
        ((long double)qkv * H + (long double)H * q_dim + 2.0L * I * H + (long double)H * I) * ws +
        2.0L * H * 4;
    long double w = (long double)n_layers * per_layer;
    if (p->has_embed)
        w += (long double)V * H * ws;
    if (p->has_head) {
        w += (long double)H * 4;
        if (!(cfg->tie_embeddings && p->has_embed))
            w += (long double)V * H * ws;
    }
    if (kv > (long double)S_MAX_BYTES || w > (long double)S_MAX_BYTES)
        return pl_error(PL_ERR_RANGE, "stage KV cache or weights too large");
    l.kv_bytes = (size_t)kv;
    l.weight_bytes = (size_t)w;
    *out = l;
    return PL_OK;
}
