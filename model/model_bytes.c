/* The stored bytes of a model described by its config.json alone (no weights at hand): what
 * planning before a download charges, each tensor in the config's dtype. */
#include "model/gguf.h"
#include "model/model.h"

#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static bool s_exists(const char *dir, const char *name)
{
    char path[4096];
    struct stat sb;
    if (pl_path_join(dir, name, path, sizeof(path)))
        return false;
    return stat(path, &sb) == 0 || errno != ENOENT;
}

bool pl_model_is_described(const char *dir)
{
    return !pl_gguf_is_file(dir) && s_exists(dir, "config.json") &&
           !s_exists(dir, "model.safetensors") && !s_exists(dir, "model.safetensors.index.json");
}

pl_status_t pl_model_bytes_estimate(const pl_model_config_t *cfg, pl_model_bytes_t **bytes_p)
{
    if (!cfg || cfg->n_layers < 1 || cfg->hidden < 1 || cfg->intermediate < 1 || cfg->n_heads < 1 ||
        cfg->n_kv_heads < 1 || cfg->head_dim < 1 || cfg->vocab < 1)
        return pl_error(PL_ERR_INVALID, "model config: a size is missing or not positive");
    size_t n = (size_t)cfg->n_layers;
    pl_model_bytes_t *b = calloc(1, sizeof(*b) + n * sizeof(uint64_t));
    if (!b)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    uint64_t es = pl_dtype_size(cfg->dtype), h = (uint64_t)cfg->hidden;
    uint64_t q = (uint64_t)cfg->n_heads * (uint64_t)cfg->head_dim;
    uint64_t kv = (uint64_t)cfg->n_kv_heads * (uint64_t)cfg->head_dim;
    uint64_t f = (uint64_t)cfg->intermediate, v = (uint64_t)cfg->vocab;
    /* the tensors pl_model_open checks for: 7 matrices, 2 norms, biases and q/k norms by family */
    uint64_t per = h * q + 2 * h * kv + q * h + 3 * h * f + 2 * h;
    if (cfg->qkv_bias)
        per += q + 2 * kv;
    if (cfg->qk_norm)
        per += 2 * (uint64_t)cfg->head_dim;
    b->layer = (uint64_t *)(b + 1);
    b->n_layers = cfg->n_layers;
    for (size_t l = 0; l < n; l++)
        b->layer[l] = per * es;
    b->embed = v * h * es;
    b->head = h * es + v * h * es;
    b->tied = cfg->tie_embeddings ? b->embed : 0;
    b->matrix_wtype = (pl_wtype_t)cfg->dtype;
    b->quantized = PL_WT_COUNT;
    *bytes_p = b;
    return PL_OK;
}
