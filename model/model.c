/* A model: a directory (config.json plus safetensors shards) or a GGUF file; a sorted name table
 * over all its tensors, the family's tensor-shape check, and access to any tensor as stored or
 * f32. */
#include "model/model.h"
#include "model/gguf_model.h"
#include "model/safetensors.h"

#include "common/json.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S_INDEX_NAME "model.safetensors.index.json"
#define S_SINGLE_NAME "model.safetensors"
#define S_MAX_INDEX_BYTES (64u << 20)
#define S_MAX_SHARDS 4096
#define S_MAX_SHARD_NAME 255

typedef struct {
    const pl_st_entry_t *entry; /* owned by the shard, or by the model for a GGUF file */
    pl_st_file_t *shard;        /* NULL: in the GGUF file */
    pl_wtype_t wtype;           /* as stored */
    int unpermute_heads;        /* > 0: rows in llama.cpp's rope order, this many heads */
    unsigned char *fixed;       /* the rows back in Hugging Face order, made on first use */
} s_tensor_t;

struct pl_model {
    char *dir;
    pl_model_config_t cfg;
    pl_st_file_t **shards;
    size_t n_shards;
    pl_gguf_t *gguf;
    pl_st_entry_t *gguf_entries;
    s_tensor_t *tensors; /* sorted by name */
    size_t n_tensors;
    uint64_t weight_bytes;
    pthread_mutex_t lock; /* guards the lazily fixed tensors */
};

static pl_status_t s_shard_add(pl_model_t *m, const char *name)
{
    char path[4096];
    pl_st_file_t **grown;
    pl_status_t st;

    if (m->n_shards >= S_MAX_SHARDS)
        return pl_error(PL_ERR_RANGE, "more than %d shards", S_MAX_SHARDS);
    if ((st = pl_path_join(m->dir, name, path, sizeof(path))))
        return st;
    grown = realloc(m->shards, (m->n_shards + 1) * sizeof(*grown));
    if (!grown)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    m->shards = grown;
    if ((st = pl_st_open(path, &m->shards[m->n_shards])))
        return st;
    m->n_shards++;
    return PL_OK;
}

static pl_status_t s_check_shard_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > S_MAX_SHARD_NAME || strchr(name, '/') || strstr(name, "..") ||
        name[0] == '.')
        return pl_error(PL_ERR_INVALID, "weight_map: shard name '%.64s' is not a plain file name",
                        name);
    return PL_OK;
}

static pl_st_file_t *s_shard_find(pl_model_t *m, const char *path)
{
    for (size_t i = 0; i < m->n_shards; i++)
        if (strcmp(m->shards[i]->path, path) == 0)
            return m->shards[i];
    return NULL;
}

static int s_by_name(const void *a, const void *b)
{
    return strcmp(((const s_tensor_t *)a)->entry->name, ((const s_tensor_t *)b)->entry->name);
}

static s_tensor_t *s_lookup(const pl_model_t *m, const char *name)
{
    pl_st_entry_t key = {.name = (char *)name};
    s_tensor_t k = {.entry = &key};
    return bsearch(&k, m->tensors, m->n_tensors, sizeof(k), s_by_name);
}

/* Sort the table; a name may appear only once. */
static pl_status_t s_sort_table(pl_model_t *m)
{
    qsort(m->tensors, m->n_tensors, sizeof(*m->tensors), s_by_name);
    for (size_t i = 1; i < m->n_tensors; i++) {
        const s_tensor_t *a = &m->tensors[i - 1], *b = &m->tensors[i];
        if (strcmp(a->entry->name, b->entry->name) == 0)
            return pl_error(PL_ERR_INVALID, "tensor '%s' appears in both %s and %s",
                            b->entry->name, a->shard ? a->shard->path : m->dir,
                            b->shard ? b->shard->path : m->dir);
    }
    return PL_OK;
}

/* Collect every shard's tensors into one sorted table. */
static pl_status_t s_build_table(pl_model_t *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_shards; i++)
        n += m->shards[i]->hdr.n_entries;
    m->tensors = calloc(n ? n : 1, sizeof(*m->tensors));
    if (!m->tensors)
        return pl_error(PL_ERR_NOMEM, "out of memory for %zu tensors", n);
    for (size_t i = 0; i < m->n_shards; i++) {
        for (size_t j = 0; j < m->shards[i]->hdr.n_entries; j++) {
            const pl_st_entry_t *e = &m->shards[i]->hdr.entries[j];
            m->tensors[m->n_tensors++] =
                (s_tensor_t){.entry = e, .shard = m->shards[i], .wtype = (pl_wtype_t)e->dtype};
            m->weight_bytes += e->end - e->begin;
        }
    }
    return s_sort_table(m);
}

static bool s_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A GGUF file's tensors under their Hugging Face names and shapes (dimensions reversed). */
static pl_status_t s_open_gguf(pl_model_t *m, const char *path)
{
    bool permute;
    pl_status_t st;

    if ((st = pl_gguf_open(path, &m->gguf)) ||
        (st = pl_gguf_model_config(m->gguf, &m->cfg, &permute)))
        return st;
    m->gguf_entries = calloc(m->gguf->n_tensors + 1, sizeof(*m->gguf_entries));
    m->tensors = calloc(m->gguf->n_tensors + 1, sizeof(*m->tensors));
    if (!m->gguf_entries || !m->tensors)
        return pl_error(PL_ERR_NOMEM, "out of memory for %zu tensors", m->gguf->n_tensors);
    for (size_t i = 0; i < m->gguf->n_tensors; i++) {
        const pl_gguf_tensor_t *g = &m->gguf->tensors[i];
        pl_st_entry_t *e = &m->gguf_entries[i];
        char name[PL_GGUF_MAX_NAME + 64];
        pl_gguf_hf_name(g->name, name, sizeof(name));
        if (!(e->name = strdup(name)))
            return pl_error(PL_ERR_NOMEM, "out of memory");
        /* the dtype of a view is meaningful only for the float types */
        e->dtype = g->wtype <= PL_WT_BF16 ? (pl_dtype_t)g->wtype : PL_DT_F32;
        e->ndim = g->ndim;
        for (int d = 0; d < g->ndim; d++)
            e->shape[d] = g->ne[g->ndim - 1 - d];
        e->numel = g->numel;
        e->begin = g->off;
        e->end = g->off + g->nbytes;
        m->tensors[m->n_tensors] = (s_tensor_t){.entry = e, .wtype = g->wtype};
        if (permute && g->ndim == 2 && s_ends_with(name, ".self_attn.q_proj.weight"))
            m->tensors[m->n_tensors].unpermute_heads = m->cfg.n_heads;
        if (permute && g->ndim == 2 && s_ends_with(name, ".self_attn.k_proj.weight"))
            m->tensors[m->n_tensors].unpermute_heads = m->cfg.n_kv_heads;
        m->n_tensors++;
        m->weight_bytes += g->nbytes;
    }
    return s_sort_table(m);
}

/* Open the shards named by the index and check each listed tensor is where the index says. */
static pl_status_t s_open_index(pl_model_t *m, const char *index_path)
{
    json_error_t jerr;
    json_t *root, *map, *v;
    const char *key;
    char *text;
    size_t len;
    pl_status_t st;

    if ((st = pl_file_read(index_path, S_MAX_INDEX_BYTES, &text, &len)))
        return st;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (!root)
        return pl_error(PL_ERR_INVALID, "%s: line %d column %d: %s", index_path, jerr.line,
                        jerr.column, jerr.text);
    map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        st = pl_error(PL_ERR_INVALID, "%s: field 'weight_map' missing or not an object",
                      index_path);
        goto out;
    }
    json_object_foreach(map, key, v) {
        char path[4096];
        if (!json_is_string(v)) {
            st = pl_error(PL_ERR_INVALID, "%s: weight_map['%.128s'] is not a string",
                          index_path, key);
            goto out;
        }
        if ((st = s_check_shard_name(json_string_value(v))) ||
            (st = pl_path_join(m->dir, json_string_value(v), path, sizeof(path))))
            goto err_prefix;
        if (!s_shard_find(m, path) && (st = s_shard_add(m, json_string_value(v))))
            goto err_prefix;
    }
    if (m->n_shards == 0) {
        st = pl_error(PL_ERR_INVALID, "%s: weight_map is empty", index_path);
        goto out;
    }
    if ((st = s_build_table(m)))
        goto out;
    json_object_foreach(map, key, v) {
        char path[4096];
        s_tensor_t *t = s_lookup(m, key);
        pl_path_join(m->dir, json_string_value(v), path, sizeof(path)); /* checked above */
        if (!t || strcmp(t->shard->path, path) != 0) {
            st = pl_error(PL_ERR_INVALID, "%s: tensor '%.128s' is listed in %s but not found "
                          "there", index_path, key, json_string_value(v));
            goto out;
        }
    }
    st = PL_OK;
    goto out;
err_prefix:
    pl_error_prefix(st, "%s: ", index_path);
out:
    json_decref(root);
    return st;
}

static pl_status_t s_expect(pl_model_t *m, const char *name, int ndim, int64_t d0, int64_t d1)
{
    int64_t shape[2] = {d0, d1};
    if (!s_lookup(m, name))
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s' is missing", m->dir, name);
    return pl_model_tensor_shaped(m, name, ndim, shape, NULL);
}

/* A tensor the family's decoder loads, with the shape the config implies (d1 0: a vector). */
typedef struct {
    char name[128];
    int ndim;
    int64_t d0, d1;
} s_want_t;

#define S_LAYER_MAX 16

/* The tensors a stage loads for layer l: the one list that the shape check and the byte count
 * share. Returns how many were written to out. */
static int s_layer_tensors(const pl_model_config_t *c, int l, s_want_t *out)
{
    int64_t h = c->hidden, q = (int64_t)c->n_heads * c->head_dim;
    int64_t kv = (int64_t)c->n_kv_heads * c->head_dim, f = c->intermediate;
    static const char *const s_sq[] = {"input_layernorm", "post_attention_layernorm"};
    struct {
        const char *name;
        int64_t d0, d1;
    } mats[] = {{"self_attn.q_proj", q, h}, {"self_attn.k_proj", kv, h},
                {"self_attn.v_proj", kv, h}, {"self_attn.o_proj", h, q},
                {"mlp.gate_proj", f, h},     {"mlp.up_proj", f, h},
                {"mlp.down_proj", h, f}};
    int n = 0;
#define S_WANT(nd, a, b, ...)                                                                      \
    (snprintf(out[n].name, sizeof(out[n].name), __VA_ARGS__), out[n].ndim = (nd), out[n].d0 = (a), \
     out[n].d1 = (b), n++)
    for (size_t i = 0; i < PL_ARRAY_SIZE(mats); i++) {
        S_WANT(2, mats[i].d0, mats[i].d1, "model.layers.%d.%s.weight", l, mats[i].name);
        if (c->qkv_bias && i < 3) /* q, k, v */
            S_WANT(1, mats[i].d0, 0, "model.layers.%d.%s.bias", l, mats[i].name);
    }
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_sq); i++)
        S_WANT(1, h, 0, "model.layers.%d.%s.weight", l, s_sq[i]);
    for (int i = 0; c->qk_norm && i < 2; i++)
        S_WANT(1, c->head_dim, 0, "model.layers.%d.self_attn.%s_norm.weight", l, i ? "k" : "q");
#undef S_WANT
    return n;
}

/* Every tensor the family's decoder needs must exist with the shape the config implies. */
static pl_status_t s_check_llama(pl_model_t *m)
{
    const pl_model_config_t *c = &m->cfg;
    s_want_t want[S_LAYER_MAX];
    pl_status_t st;

    if ((st = s_expect(m, "model.embed_tokens.weight", 2, c->vocab, c->hidden)) ||
        (st = s_expect(m, "model.norm.weight", 1, c->hidden, 0)))
        return st;
    if (!c->tie_embeddings || s_lookup(m, "lm_head.weight"))
        if ((st = s_expect(m, "lm_head.weight", 2, c->vocab, c->hidden)))
            return st;
    for (int l = 0; l < c->n_layers; l++) {
        int n = s_layer_tensors(c, l, want);
        for (int i = 0; i < n; i++)
            if ((st = s_expect(m, want[i].name, want[i].ndim, want[i].d0, want[i].d1)))
                return st;
    }
    return PL_OK;
}

/* Add tensor `name`'s stored bytes to *sum; note its type in b (the first quantized one). */
static pl_status_t s_count(const pl_model_t *m, const char *name, pl_model_bytes_t *b,
                           uint64_t *sum)
{
    const s_tensor_t *t = s_lookup(m, name);
    const pl_wtype_info_t *wi = t ? pl_wtype_info(t->wtype) : NULL;
    if (!t || !wi) /* pl_model_open checked every one */
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s' is missing", m->dir, name);
    *sum += t->entry->end - t->entry->begin;
    if (wi->quantized && b->quantized == PL_WT_COUNT)
        b->quantized = t->wtype;
    return PL_OK;
}

pl_status_t pl_model_bytes_new(const pl_model_t *model, pl_model_bytes_t **bytes_p)
{
    const pl_model_config_t *c = &model->cfg;
    size_t n = (size_t)(c->n_layers > 0 ? c->n_layers : 0);
    pl_model_bytes_t *b = calloc(1, sizeof(*b) + (n ? n : 1) * sizeof(uint64_t));
    s_want_t want[S_LAYER_MAX];
    char first[128];
    pl_status_t st;

    if (!b)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    b->layer = (uint64_t *)(b + 1);
    b->n_layers = (int)n;
    b->quantized = PL_WT_COUNT;
    for (int l = 0; l < (int)n; l++) {
        int k = s_layer_tensors(c, l, want);
        for (int i = 0; i < k; i++)
            if ((st = s_count(model, want[i].name, b, &b->layer[l])))
                goto err;
    }
    const char *head = c->tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
    if ((st = s_count(model, "model.embed_tokens.weight", b, &b->embed)) ||
        (st = s_count(model, "model.norm.weight", b, &b->head)) ||
        (st = s_count(model, head, b, &b->head)))
        goto err;
    b->tied = c->tie_embeddings ? b->embed : 0;
    snprintf(first, sizeof(first), n ? "model.layers.0.self_attn.q_proj.weight" : "%s", head);
    b->matrix_wtype = s_lookup(model, first)->wtype; /* counted above */
    *bytes_p = b;
    return PL_OK;
err:
    free(b);
    return st;
}

void pl_model_bytes_destroy(pl_model_bytes_t **bytes_p)
{
    if (!bytes_p || !*bytes_p)
        return;
    free(*bytes_p);
    *bytes_p = NULL;
}

pl_status_t pl_model_open(const char *dir, pl_model_t **model_p)
{
    char path[4096];
    struct stat sb;
    pl_model_t *m = calloc(1, sizeof(*m));
    pl_status_t st;

    if (!m)
        return pl_error(PL_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&m->lock, NULL);
    m->dir = strdup(dir);
    if (!m->dir) {
        st = pl_error(PL_ERR_NOMEM, "out of memory");
        goto err;
    }
    if (pl_gguf_is_file(dir)) {
        st = s_open_gguf(m, dir);
    } else if ((st = pl_model_config_load(dir, &m->cfg)) ||
               (st = pl_path_join(dir, S_INDEX_NAME, path, sizeof(path)))) {
        goto err;
    } else if (stat(path, &sb) == 0) {
        st = s_open_index(m, path);
    } else if (errno == ENOENT) {
        st = s_shard_add(m, S_SINGLE_NAME);
        if (!st)
            st = s_build_table(m);
    } else {
        st = pl_error(PL_ERR_IO, "%s: %s", path, strerror(errno));
    }
    if (st || (st = s_check_llama(m)))
        goto err;
    pl_log_debug("model %s: %d layers, %zu tensors in %zu shards, %llu bytes", dir,
                 m->cfg.n_layers, m->n_tensors, m->n_shards,
                 (unsigned long long)m->weight_bytes);
    *model_p = m;
    return PL_OK;
err:
    pl_model_destroy(&m);
    return st;
}

void pl_model_destroy(pl_model_t **model_p)
{
    pl_model_t *m = model_p ? *model_p : NULL;
    if (!m)
        return;
    for (size_t i = 0; i < m->n_shards; i++)
        pl_st_close(&m->shards[i]);
    free(m->shards);
    for (size_t i = 0; i < m->n_tensors; i++)
        free(m->tensors[i].fixed);
    for (size_t i = 0; m->gguf && i < m->gguf->n_tensors; i++)
        free(m->gguf_entries[i].name);
    free(m->gguf_entries);
    pl_gguf_free(&m->gguf);
    pthread_mutex_destroy(&m->lock);
    free(m->tensors);
    free(m->dir);
    free(m);
    *model_p = NULL;
}

const pl_model_config_t *pl_model_config(const pl_model_t *model)
{
    return &model->cfg;
}

const char *pl_model_dir(const pl_model_t *model)
{
    return model->dir;
}

const struct pl_gguf *pl_model_gguf(const pl_model_t *model)
{
    return model->gguf;
}

uint64_t pl_model_weight_bytes(const pl_model_t *model)
{
    return model->weight_bytes;
}

/* A llama model's q/k rows in llama.cpp's order (pl_gguf_llama_qk_row): a copy back in Hugging
 * Face order (whole rows, so any weight type), made once, on first use. */
static pl_status_t s_unpermute(pl_model_t *m, s_tensor_t *t, const unsigned char *src)
{
    int64_t rows = t->entry->shape[0], hd = rows / t->unpermute_heads;
    size_t row_bytes = 0;
    unsigned char *out;
    pl_status_t st = PL_OK;

    pthread_mutex_lock(&m->lock);
    if (t->fixed)
        goto out;
    if (rows % t->unpermute_heads || hd % 2 ||
        (st = pl_wtype_row_bytes(t->wtype, t->entry->shape[1], &row_bytes))) {
        st = pl_error(PL_ERR_INVALID, "%s: tensor '%s': %lld rows do not split into %d heads of "
                      "even size", m->dir, t->entry->name, (long long)rows, t->unpermute_heads);
        goto out;
    }
    if (!(out = malloc((size_t)rows * row_bytes + 1))) {
        st = pl_error(PL_ERR_NOMEM, "tensor '%s': out of memory", t->entry->name);
        goto out;
    }
    for (int64_t r = 0; r < rows; r++) /* GGUF row r is Hugging Face row qk_row(r) */
        memcpy(out + (size_t)pl_gguf_llama_qk_row(r, hd) * row_bytes, src + (size_t)r * row_bytes,
               row_bytes);
    t->fixed = out;
out:
    pthread_mutex_unlock(&m->lock);
    return st;
}

pl_status_t pl_model_tensor(pl_model_t *model, const char *name, pl_tensor_view_t *view)
{
    s_tensor_t *t = s_lookup(model, name);
    const unsigned char *data;
    pl_status_t st;

    if (!t)
        return pl_error(PL_ERR_NOT_FOUND, "%s: no tensor '%s'", model->dir, name);
    if (t->shard && (st = pl_st_data(t->shard, &data)))
        return st;
    if (!t->shard)
        data = model->gguf->buf + model->gguf->data_off;
    if (t->unpermute_heads && (st = s_unpermute(model, t, data + t->entry->begin)))
        return st;
    view->dtype = t->entry->dtype;
    view->wtype = t->wtype;
    view->ndim = t->entry->ndim;
    memcpy(view->shape, t->entry->shape, sizeof(view->shape));
    view->numel = t->entry->numel;
    view->data = t->fixed ? t->fixed : data + t->entry->begin;
    view->nbytes = (size_t)(t->entry->end - t->entry->begin);
    return PL_OK;
}

static void s_shape_str(char *out, size_t len, int ndim, const int64_t *shape)
{
    size_t o = (size_t)snprintf(out, len, "[");
    for (int d = 0; d < ndim && o < len; d++)
        o += (size_t)snprintf(out + o, len - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < len)
        snprintf(out + o, len - o, "]");
}

pl_status_t pl_model_tensor_shaped(pl_model_t *model, const char *name, int ndim,
                                   const int64_t *shape, pl_tensor_view_t *view)
{
    s_tensor_t *t = s_lookup(model, name);
    bool same;

    if (!t)
        return pl_error(PL_ERR_NOT_FOUND, "%s: no tensor '%s'", model->dir, name);
    same = shape == NULL || t->entry->ndim == ndim;
    for (int d = 0; same && shape && d < ndim; d++)
        same = t->entry->shape[d] == shape[d];
    if (!same) {
        char have[96], want[96];
        s_shape_str(have, sizeof(have), t->entry->ndim, t->entry->shape);
        s_shape_str(want, sizeof(want), ndim, shape);
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s' has shape %s, expected %s", model->dir,
                        name, have, want);
    }
    return view ? pl_model_tensor(model, name, view) : PL_OK;
}

pl_status_t pl_model_tensor_f32(pl_model_t *model, const char *name, int ndim,
                                const int64_t *shape, float **data_p, bool *owned_p)
{
    pl_tensor_view_t v;
    float *out;
    pl_status_t st = pl_model_tensor_shaped(model, name, ndim, shape, &v);

    if (st)
        return st;
    if (v.wtype == PL_WT_F32 && ((uintptr_t)v.data & 3) == 0) {
        *data_p = (float *)v.data; /* read-only mapping: callers must not write */
        *owned_p = false;
        return PL_OK;
    }
    out = malloc(v.numel ? (size_t)v.numel * sizeof(float) : 1);
    if (!out)
        return pl_error(PL_ERR_NOMEM, "tensor '%s': out of memory for %lld floats", name,
                        (long long)v.numel);
    pl_wtype_to_f32(v.wtype, v.data, (size_t)v.numel, out);
    *data_p = out;
    *owned_p = true;
    return PL_OK;
}
