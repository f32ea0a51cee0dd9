/* One microbatch through a GPU stage: metadata and activations go through pinned buffers with
 * async copies on the stage's stream; decode steps replay a graph captured per batch size. */
#include "backends/gpu/gpu_internal.h"

#include "common/log.h"
#include "common/util.h"

#include <string.h>

#define S_TRY(expr)                                                                                \
    do {                                                                                           \
        pl_status_t s_try_ = (expr);                                                               \
        if (s_try_ != PL_OK)                                                                       \
            return s_try_;                                                                         \
    } while (0)
#define S_GPU(expr, what) S_TRY(pl_gpu_status((expr), (what)))

static pl_status_t s_layer(pl_gpu_stage_t *st, const pl_gpu_layer_t *L, const pl_gpu_meta_t *ml)
{
    const pl_model_config_t *c = &st->cfg;
    cudaStream_t s = st->stream;
    int T = ml->n_tokens, H = c->hidden, I = c->intermediate, hd = c->head_dim;
    int q_dim = c->n_heads * hd, qkv = q_dim + 2 * c->n_kv_heads * hd;
    const int32_t *m = st->meta_d;

    S_GPU(pl_gpu_rmsnorm(st->resid, NULL, T, H, L->ln_attn, c->rms_eps, st->xa, st->act_dt, s),
          "rmsnorm");
    S_TRY(pl_gpu_gemm(st->blas, st->xa, st->act_dt, T, H, L->w_qkv, st->w_dt, qkv, st->fb, false));
    S_GPU(pl_gpu_rope_kv(st->fb, T, qkv, c->n_heads, c->n_kv_heads, hd, st->cos_tab, st->sin_tab,
                         m + ml->tok_slot, m + ml->tok_pos, L->k_cache, L->v_cache, st->kv_dt,
                         st->p.max_ctx, s),
          "rope");

    pl_gpu_attn_args_t a = {
        .q = st->fb,
        .q_stride = qkv,
        .k_cache = L->k_cache,
        .v_cache = L->v_cache,
        .kv_dt = st->kv_dt,
        .max_ctx = st->p.max_ctx,
        .n_heads = c->n_heads,
        .n_kv = c->n_kv_heads,
        .head_dim = hd,
        .scale = st->scale,
        .n_seq = ml->n_seq,
        .seq_slot = m + ml->seq_slot,
        .seq_pos0 = m + ml->seq_pos0,
        .seq_ntok = m + ml->seq_ntok,
        .seq_off = m + ml->seq_off,
        .out = st->xa,
        .out_dt = st->act_dt,
        .out_stride = q_dim,
    };
    if (ml->decode) {
        int splits, chunk;
        pl_gpu_decode_split(st->p.max_ctx, ml->n_seq, c->n_heads, &splits, &chunk);
        S_GPU(pl_gpu_attn_decode(&a, splits, chunk, st->work, s), "decode attention");
    } else {
        S_GPU(pl_gpu_attn_prefill(&a, ml->max_ntok, s), "prefill attention");
    }
    S_TRY(
        pl_gpu_gemm(st->blas, st->xa, st->act_dt, T, q_dim, L->w_o, st->w_dt, H, st->resid, true));
    S_GPU(pl_gpu_rmsnorm(st->resid, NULL, T, H, L->ln_mlp, c->rms_eps, st->xa, st->act_dt, s),
          "rmsnorm");
    S_TRY(pl_gpu_gemm(st->blas, st->xa, st->act_dt, T, H, L->w_gu, st->w_dt, 2 * I, st->fb, false));
    S_GPU(pl_gpu_swiglu(st->fb, T, I, st->xa, st->act_dt, s), "swiglu");
    S_TRY(pl_gpu_gemm(st->blas, st->xa, st->act_dt, T, I, L->w_down, st->w_dt, H, st->resid, true));
    return PL_OK;
}

/* Enqueue the whole forward on the stage stream: inputs from the pinned buffers, outputs into
 * them. Everything it touches has a fixed address, so it can be captured. */
static pl_status_t s_enqueue(pl_gpu_stage_t *st, const pl_gpu_meta_t *ml)
{
    const pl_model_config_t *c = &st->cfg;
    cudaStream_t s = st->stream;
    int T = ml->n_tokens, H = c->hidden;
    const int32_t *m = st->meta_d;

    S_GPU(cudaMemcpyAsync(st->meta_d, st->meta_h, ml->count * sizeof(int32_t),
                          cudaMemcpyHostToDevice, s),
          "metadata upload");
    if (st->p.has_embed)
        S_GPU(pl_gpu_embed(st->w_embed, st->w_dt, H, m + ml->tok_id, T, st->resid, s), "embedding");
    else
        S_GPU(cudaMemcpyAsync(st->resid, st->in_h, (size_t)T * H * sizeof(float),
                              cudaMemcpyHostToDevice, s),
              "activation upload");
    if (st->n_layers > 0)
        S_GPU(pl_gpu_rope_table(st->inv_freq, c->head_dim / 2, m + ml->tok_pos, T, st->cos_tab,
                                st->sin_tab, s),
              "rope table");
    for (int i = 0; i < st->n_layers; i++)
        S_TRY(s_layer(st, &st->layers[i], ml));
    if (st->p.has_head) {
        S_GPU(pl_gpu_rmsnorm(st->resid, m + ml->last_row, ml->n_seq, H, st->final_norm, c->rms_eps,
                             st->xh, st->act_dt, s),
              "final norm");
        S_TRY(pl_gpu_gemm(st->blas, st->xh, st->act_dt, ml->n_seq, H, st->w_lm, st->w_dt, c->vocab,
                          st->logits, false));
        S_GPU(cudaMemcpyAsync(st->out_h, st->logits, (size_t)ml->n_seq * c->vocab * sizeof(float),
                              cudaMemcpyDeviceToHost, s),
              "logits download");
    } else {
        S_GPU(cudaMemcpyAsync(st->out_h, st->resid, (size_t)T * H * sizeof(float),
                              cudaMemcpyDeviceToHost, s),
              "activation download");
    }
    return PL_OK;
}

void pl_gpu_graphs_clear(pl_gpu_stage_t *st)
{
    for (int i = 0; st->graphs && i < st->p.max_seqs; i++) {
        if (st->graphs[i].exec)
            cudaGraphExecDestroy(st->graphs[i].exec);
        st->graphs[i].exec = NULL;
        st->graphs[i].uses = 0;
    }
}

/* Capture s_enqueue for this decode shape. The first forward of a shape runs eagerly (it loads
 * modules and lets cuBLAS pick its kernels outside capture); the second captures. A capture that
 * fails turns graphs off for the stage and the step runs eagerly. */
static pl_status_t s_run_graph(pl_gpu_stage_t *st, const pl_gpu_meta_t *ml)
{
    pl_gpu_graph_t *g = &st->graphs[ml->n_seq - 1];
    if (!g->exec && g->uses++ == 0)
        return s_enqueue(st, ml);
    if (!g->exec) {
        cudaGraph_t graph = NULL;
        pl_status_t s = pl_gpu_status(
            cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal), "capture");
        if (s == PL_OK) {
            s = s_enqueue(st, ml);
            cudaError_t e = cudaStreamEndCapture(st->stream, &graph);
            if (s == PL_OK)
                s = pl_gpu_status(e, "graph capture");
        }
        if (s == PL_OK)
            s = pl_gpu_status(cudaGraphInstantiateWithFlags(&g->exec, graph, 0),
                              "graph instantiate");
        if (graph)
            cudaGraphDestroy(graph);
        if (s != PL_OK) {
            g->exec = NULL;
            (void)cudaGetLastError();
            pl_log_warn("%s device %d: decode graphs off for this stage: %s", PL_GPU_BACKEND,
                        st->dev->info.index, pl_error_msg());
            st->use_graphs = false;
            return s_enqueue(st, ml);
        }
        pl_log_debug("%s: captured decode graph for %d sequences", PL_GPU_BACKEND, ml->n_seq);
    }
    return pl_gpu_status(cudaGraphLaunch(g->exec, st->stream), "graph launch");
}

pl_status_t pl_gpu_stage_forward(void *stage, const pl_be_batch_t *batch, const void *in, void *out)
{
    pl_gpu_stage_t *st = stage;
    const pl_model_config_t *c = &st->cfg;
    pl_gpu_meta_t ml;
    pl_status_t s;

    if (!in || !out)
        return pl_error(PL_ERR_INVALID, "forward: missing input or output buffer");
    if ((s = pl_gpu_batch_check(batch, st->p.max_seqs, st->p.max_ctx, st->p.max_tokens)))
        return s;
    for (int i = 0; i < batch->n_seq; i++) {
        int slot = batch->slot[i];
        if (batch->pos0[i] > st->filled[slot])
            return pl_error(PL_ERR_RANGE,
                            "batch: sequence %d: pos0 %d skips positions (slot %d "
                            "holds %d)",
                            i, batch->pos0[i], slot, st->filled[slot]);
    }
    const int32_t *ids = NULL;
    if (st->p.has_embed) {
        ids = in;
        for (int t = 0; t < batch->n_tokens; t++)
            if (ids[t] < 0 || ids[t] >= c->vocab)
                return pl_error(PL_ERR_RANGE,
                                "batch: token %d: id %d outside the vocabulary "
                                "of %d",
                                t, ids[t], c->vocab);
    }
    if ((s = pl_gpu_meta_fill(batch, ids, st->meta_h,
                              pl_gpu_meta_capacity(st->p.max_tokens, st->p.max_seqs), &ml)))
        return s;
    if (!st->p.has_embed)
        memcpy(st->in_h, in, (size_t)batch->n_tokens * c->hidden * sizeof(float));
    if ((s = pl_gpu_status(cudaSetDevice(st->dev->index), "cudaSetDevice")))
        return s;

    if (ml.decode && st->use_graphs)
        s = s_run_graph(st, &ml);
    else
        s = s_enqueue(st, &ml);
    /* wait even after a failed enqueue: earlier work may still read the pinned buffers */
    cudaError_t e = cudaStreamSynchronize(st->stream);
    if (s == PL_OK)
        s = pl_gpu_status(e, "forward");
    if (s != PL_OK) {
        pl_gpu_graphs_clear(st);
        return s;
    }

    if (st->p.has_head)
        memcpy(out, st->out_h, (size_t)batch->n_seq * c->vocab * sizeof(float));
    else
        memcpy(out, st->out_h, (size_t)batch->n_tokens * c->hidden * sizeof(float));
    for (int i = 0; i < batch->n_seq; i++) {
        int end = batch->pos0[i] + batch->n_tok[i];
        if (end > st->filled[batch->slot[i]])
            st->filled[batch->slot[i]] = end;
    }
    return PL_OK;
}
