/* pl-mkmodel's GGUF file: the family's metadata, matrices in --type (a llama's q/k rows in
 * llama.cpp's rope order), norms and biases in f32, as llama.cpp's converter writes them. Values
 * are the safetensors ones. */
#include "tools/mkmodel/mkmodel_int.h"
#include "common/util.h"
#include "model/gguf_model.h"
#include "model/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GGUF's architecture name: Mistral files use llama's. */
static const char *s_gguf_arch(const pl_mkmodel_opts_t *o)
{
    return o->family == PL_FAMILY_QWEN2 ? "qwen2" : o->family == PL_FAMILY_QWEN3 ? "qwen3"
                                                                                : "llama";
}

static pl_status_t s_gguf_meta(pl_gguf_writer_t *w, const pl_mkmodel_opts_t *o)
{
    const char *arch = s_gguf_arch(o);
    char k[16][96];
    static const char *const suffix[] = {
        "context_length", "embedding_length", "block_count", "feed_forward_length",
        "attention.head_count", "attention.head_count_kv", "attention.key_length",
        "attention.value_length", "rope.dimension_count", "vocab_size",
        "attention.layer_norm_rms_epsilon", "rope.freq_base"};
    const int v[] = {o->max_pos, o->hidden, o->layers, o->inter, o->heads, o->kv_heads,
                     o->head_dim, o->head_dim, o->head_dim, o->vocab};
    pl_status_t st;

    for (size_t i = 0; i < PL_ARRAY_SIZE(suffix); i++)
        snprintf(k[i], sizeof(k[i]), "%s.%s", arch, suffix[i]);
    if ((st = pl_gguf_writer_str(w, "general.architecture", arch)) ||
        (st = pl_gguf_writer_str(w, "general.name", "pl-mkmodel")))
        return st;
    for (size_t i = 0; i < PL_ARRAY_SIZE(v); i++)
        if ((st = pl_gguf_writer_u32(w, k[i], (uint32_t)v[i])))
            return st;
    if ((st = pl_gguf_writer_f32(w, k[10], 1e-5f)) ||
        (st = pl_gguf_writer_f32(w, k[11], 10000.0f)) ||
        (st = pl_gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", o->vocab > 1 ? 1 : 0)) ||
        (st = pl_gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)o->eos[0])))
        return st;
    return PL_OK;
}

static pl_wtype_t s_gguf_type(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t)
{
    return t->ndim == 2 ? o->wtype : PL_WT_F32;
}

/* Hugging Face row of GGUF row r: a llama-architecture q or k matrix is stored in llama.cpp's
 * rope order, other rows where they are. */
static int64_t s_hf_row(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, int64_t r)
{
    bool qk = t->ndim == 2 && strcmp(s_gguf_arch(o), "llama") == 0 &&
              (strstr(t->name, "q_proj") || strstr(t->name, "k_proj"));
    return qk ? pl_gguf_llama_qk_row(r, o->head_dim) : r;
}

int pl_mkmodel_gguf_write(const pl_mkmodel_opts_t *o, const pl_mkmodel_tensor_t *t, size_t n,
                          uint64_t *bytes_p)
{
    pl_gguf_writer_t *w = NULL;
    FILE *f = NULL;
    float *row = NULL;
    unsigned char *q = NULL;
    char gname[128];
    int64_t max_in = PL_MAX(o->hidden, o->inter);
    size_t row_bytes;
    pl_status_t st;
    int rc = 1;

    if ((st = pl_gguf_writer_new(&w)) || (st = s_gguf_meta(w, o)))
        goto out_err;
    for (size_t i = 0; i < n; i++) {
        int64_t ne[2] = {t[i].ndim == 1 ? t[i].shape[0] : t[i].shape[1], t[i].shape[0]};
        if (!pl_gguf_name_of(t[i].name, gname, sizeof(gname))) {
            st = pl_error(PL_ERR_INVALID, "no GGUF name for tensor '%s'", t[i].name);
            goto out_err;
        }
        if ((st = pl_gguf_writer_tensor(w, gname, s_gguf_type(o, &t[i]), t[i].ndim, ne)))
            goto out_err;
    }
    row = malloc((size_t)PL_MAX(max_in, o->vocab) * sizeof(float));
    q = malloc((size_t)PL_MAX(max_in, o->vocab) * sizeof(float));
    if (!row || !q || !(f = fopen(o->out, "wb"))) {
        pl_mkmodel_fail("%s: %s", o->out, row && q ? strerror(errno) : "out of memory");
        goto out;
    }
    if ((st = pl_gguf_writer_header(w, f)))
        goto out_err;
    for (size_t i = 0; i < n; i++) {
        int64_t in = t[i].ndim == 1 ? t[i].shape[0] : t[i].shape[1];
        int64_t rows = t[i].ndim == 1 ? 1 : t[i].shape[0];
        pl_wtype_t dt = s_gguf_type(o, &t[i]);
        if ((st = pl_wtype_row_bytes(dt, in, &row_bytes)))
            goto out_err;
        for (int64_t r = 0; r < rows; r++) {
            pl_mkmodel_tensor_values(o, &t[i], s_hf_row(o, &t[i], r) * in, (size_t)in, row);
            pl_wtype_from_f32(dt, row, (size_t)in, q);
            if ((st = pl_gguf_writer_data(w, f, q, row_bytes)))
                goto out_err;
        }
        *bytes_p += (uint64_t)rows * row_bytes;
    }
    rc = pl_gguf_writer_done(w) ? 0 : pl_mkmodel_fail("%s: tensors incomplete", o->out);
    goto out;
out_err:
    pl_mkmodel_fail("%s: %s", o->out, pl_error_msg());
out:
    if (f && fclose(f) != 0 && rc == 0)
        rc = pl_mkmodel_fail("%s: close: %s", o->out, strerror(errno));
    free(row);
    free(q);
    pl_gguf_writer_destroy(&w);
    return rc;
}
