/* The GGUF container: a cursor that checks every read against the end of the file, the metadata
 * and tensor-info tables, their sorted lookups, and the read-only mapping of a file. */
#include "model/gguf.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const unsigned char *p;
    uint64_t len, pos;
    const char *label;
} s_cur_t;

static const char *const s_vtype_names[PL_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
static const uint8_t s_vtype_size[PL_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

/* Take n bytes at the cursor, or fail naming `what` and where it would end. */
static pl_status_t s_take(s_cur_t *c, uint64_t n, const char *what, const unsigned char **p_p)
{
    if (n > c->len - c->pos)
        return pl_error(PL_ERR_INVALID, "%s: %s at offset %llu needs %llu bytes, past the end "
                        "of the file (%llu bytes)", c->label, what, (unsigned long long)c->pos,
                        (unsigned long long)n, (unsigned long long)c->len);
    *p_p = c->p + c->pos;
    c->pos += n;
    return PL_OK;
}

static uint64_t s_le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static pl_status_t s_u32(s_cur_t *c, const char *what, uint32_t *v)
{
    const unsigned char *p = NULL;
    pl_status_t st = s_take(c, 4, what, &p);
    if (!st)
        *v = (uint32_t)s_le(p, 4);
    return st;
}

static pl_status_t s_u64(s_cur_t *c, const char *what, uint64_t *v)
{
    const unsigned char *p = NULL;
    pl_status_t st = s_take(c, 8, what, &p);
    if (!st)
        *v = s_le(p, 8);
    return st;
}

/* A string: u64 length, then that many bytes; *off_p is where the bytes start. */
static pl_status_t s_str(s_cur_t *c, const char *what, uint64_t max, uint64_t *off_p,
                         uint64_t *len_p)
{
    const unsigned char *p = NULL;
    uint64_t n;
    pl_status_t st = s_u64(c, what, &n);
    if (st)
        return st;
    if (n > max)
        return pl_error(PL_ERR_RANGE, "%s: %s at offset %llu: length %llu is more than %llu",
                        c->label, what, (unsigned long long)(c->pos - 8), (unsigned long long)n,
                        (unsigned long long)max);
    if ((st = s_take(c, n, what, &p)))
        return st;
    *off_p = (uint64_t)(p - c->p);
    *len_p = n;
    return PL_OK;
}

/* A NUL-terminated copy of a key or name; embedded NULs are refused. */
static pl_status_t s_name(s_cur_t *c, const char *what, uint64_t max, char **out)
{
    uint64_t off = 0, len = 0; /* set by s_str on success; -O3 cannot see it */
    pl_status_t st = s_str(c, what, max, &off, &len);
    if (st)
        return st;
    if (len == 0 || memchr(c->p + off, 0, len))
        return pl_error(PL_ERR_INVALID, "%s: %s at offset %llu is empty or holds a NUL byte",
                        c->label, what, (unsigned long long)off);
    *out = strndup((const char *)c->p + off, len);
    return *out ? PL_OK : pl_error(PL_ERR_NOMEM, "%s: out of memory", c->label);
}

static pl_status_t s_value(s_cur_t *c, pl_gguf_kv_t *kv)
{
    uint32_t t;
    const unsigned char *p = NULL;
    pl_status_t st = s_u32(c, "value type", &t);

    if (st)
        return st;
    if (t >= PL_GGUF_VTYPE_COUNT)
        return pl_error(PL_ERR_INVALID, "%s: key '%s': unknown value type %u", c->label,
                        kv->key, t);
    kv->type = (pl_gguf_vtype_t)t;
    if (t == PL_GGUF_STR)
        return s_str(c, "string value", UINT64_MAX, &kv->off, &kv->n);
    if (t != PL_GGUF_ARR) {
        if ((st = s_take(c, s_vtype_size[t], "value", &p)))
            return st;
        kv->off = (uint64_t)(p - c->p);
        if (t == PL_GGUF_BOOL && *p > 1)
            return pl_error(PL_ERR_INVALID, "%s: key '%s': bool value %u is neither 0 nor 1",
                            c->label, kv->key, *p);
        return PL_OK;
    }
    if ((st = s_u32(c, "array element type", &t)) || (st = s_u64(c, "array length", &kv->n)))
        return st;
    if (t >= PL_GGUF_VTYPE_COUNT || t == PL_GGUF_ARR)
        return pl_error(PL_ERR_UNSUPPORTED, "%s: key '%s': array element type %u is not "
                        "supported (nested arrays are not)", c->label, kv->key, t);
    kv->elem = (pl_gguf_vtype_t)t;
    kv->off = c->pos;
    if (t != PL_GGUF_STR) {
        if (kv->n > (c->len - c->pos) / s_vtype_size[t])
            return pl_error(PL_ERR_INVALID, "%s: key '%s': array of %llu %s runs past the end "
                            "of the file", c->label, kv->key, (unsigned long long)kv->n,
                            s_vtype_names[t]);
        c->pos += kv->n * s_vtype_size[t];
        return PL_OK;
    }
    /* each string is at least its 8-byte length: bound the count before allocating */
    if (kv->n > (c->len - c->pos) / 8)
        return pl_error(PL_ERR_INVALID, "%s: key '%s': array of %llu strings runs past the end "
                        "of the file", c->label, kv->key, (unsigned long long)kv->n);
    kv->str_offs = malloc((size_t)(kv->n ? kv->n : 1) * sizeof(uint64_t));
    if (!kv->str_offs)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", c->label);
    for (uint64_t i = 0; i < kv->n; i++) {
        uint64_t len;
        if ((st = s_str(c, "array string", UINT64_MAX, &kv->str_offs[i], &len)))
            return pl_error_prefix(st, "key '%s' element %llu: ", kv->key,
                                   (unsigned long long)i);
    }
    return PL_OK;
}

static int s_kv_cmp(const void *a, const void *b)
{
    return strcmp((*(pl_gguf_kv_t *const *)a)->key, (*(pl_gguf_kv_t *const *)b)->key);
}

static int s_t_cmp(const void *a, const void *b)
{
    return strcmp((*(pl_gguf_tensor_t *const *)a)->name, (*(pl_gguf_tensor_t *const *)b)->name);
}

static int s_off_cmp(const void *a, const void *b)
{
    uint64_t x = (*(pl_gguf_tensor_t *const *)a)->off, y = (*(pl_gguf_tensor_t *const *)b)->off;
    return x < y ? -1 : x > y;
}

static pl_status_t s_tensor_info(s_cur_t *c, pl_gguf_tensor_t *t)
{
    uint32_t nd, type;
    uint64_t row;
    size_t row_bytes;
    pl_status_t st = s_name(c, "tensor name", PL_GGUF_MAX_NAME, &t->name);

    if (st || (st = s_u32(c, "tensor dimension count", &nd)))
        return st;
    if (nd < 1 || nd > 4)
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': %u dimensions (1 to 4 allowed)",
                        c->label, t->name, nd);
    t->ndim = (int)nd;
    t->numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if ((st = s_u64(c, "tensor dimension", &ne)))
            return st;
        if (ne < 1 || ne > (uint64_t)INT64_MAX / (uint64_t)t->numel)
            return pl_error(PL_ERR_INVALID, "%s: tensor '%s': dimension %u is %llu (zero, or "
                            "the element count overflows)", c->label, t->name, d,
                            (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        t->numel *= (int64_t)ne;
    }
    if ((st = s_u32(c, "tensor type", &type)) || (st = s_u64(c, "tensor offset", &t->off)))
        return st;
    if ((st = pl_gguf_wtype(type, &t->wtype)))
        return pl_error_prefix(st, "%s: tensor '%s': ", c->label, t->name);
    if ((st = pl_wtype_row_bytes(t->wtype, t->ne[0], &row_bytes)))
        return pl_error_prefix(st, "%s: tensor '%s': ", c->label, t->name);
    row = (uint64_t)(t->numel / t->ne[0]);
    if (row_bytes && row > UINT64_MAX / row_bytes)
        return pl_error(PL_ERR_RANGE, "%s: tensor '%s' is too large", c->label, t->name);
    t->nbytes = row * row_bytes;
    return PL_OK;
}

/* Offsets aligned, tensors inside the data section and not overlapping, names unique. */
static pl_status_t s_check_tensors(pl_gguf_t *g)
{
    uint64_t data_len = g->len >= g->data_off ? g->len - g->data_off : 0;
    pl_gguf_tensor_t **by_off;

    if (g->n_tensors && g->data_off > g->len)
        return pl_error(PL_ERR_INVALID, "%s: the data section (offset %llu) starts past the end "
                        "of the file (%zu bytes)", g->label, (unsigned long long)g->data_off,
                        g->len);
    for (size_t i = 0; i < g->n_tensors; i++) {
        const pl_gguf_tensor_t *t = &g->tensors[i];
        if (t->off % g->alignment)
            return pl_error(PL_ERR_INVALID, "%s: tensor '%s': offset %llu is not a multiple of "
                            "the alignment %llu", g->label, t->name, (unsigned long long)t->off,
                            (unsigned long long)g->alignment);
        if (t->off > data_len || t->nbytes > data_len - t->off)
            return pl_error(PL_ERR_INVALID, "%s: tensor '%s': bytes %llu..%llu lie past the end "
                            "of the data section (%llu bytes; truncated file?)", g->label,
                            t->name, (unsigned long long)t->off,
                            (unsigned long long)(t->off + t->nbytes),
                            (unsigned long long)data_len);
        g->t_by_name[i] = &g->tensors[i];
    }
    qsort(g->t_by_name, g->n_tensors, sizeof(*g->t_by_name), s_t_cmp);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (strcmp(g->t_by_name[i - 1]->name, g->t_by_name[i]->name) == 0)
            return pl_error(PL_ERR_INVALID, "%s: tensor '%s' appears twice", g->label,
                            g->t_by_name[i]->name);
    by_off = malloc((g->n_tensors ? g->n_tensors : 1) * sizeof(*by_off));
    if (!by_off)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", g->label);
    memcpy(by_off, g->t_by_name, g->n_tensors * sizeof(*by_off));
    qsort(by_off, g->n_tensors, sizeof(*by_off), s_off_cmp);
    for (size_t i = 1; i < g->n_tensors; i++) {
        if (by_off[i]->off < by_off[i - 1]->off + by_off[i - 1]->nbytes) {
            pl_status_t st = pl_error(PL_ERR_INVALID, "%s: tensors '%s' and '%s' overlap",
                                      g->label, by_off[i - 1]->name, by_off[i]->name);
            free(by_off);
            return st;
        }
    }
    free(by_off);
    return PL_OK;
}

static pl_status_t s_alignment(pl_gguf_t *g)
{
    const pl_gguf_kv_t *kv = pl_gguf_find(g, "general.alignment");
    uint64_t a;

    g->alignment = PL_GGUF_DEFAULT_ALIGNMENT;
    if (!kv)
        return PL_OK;
    if (kv->type != PL_GGUF_U32)
        return pl_error(PL_ERR_INVALID, "%s: general.alignment is a %s, not a u32", g->label,
                        kv->type < PL_GGUF_VTYPE_COUNT ? s_vtype_names[kv->type] : "?");
    a = s_le(g->buf + kv->off, 4);
    if (a == 0 || (a & (a - 1)) || a > PL_GGUF_MAX_ALIGNMENT)
        return pl_error(PL_ERR_INVALID, "%s: general.alignment %llu is not a power of two up "
                        "to %u", g->label, (unsigned long long)a, PL_GGUF_MAX_ALIGNMENT);
    g->alignment = a;
    return PL_OK;
}

static pl_status_t s_parse(pl_gguf_t *g)
{
    s_cur_t c = {.p = g->buf, .len = g->len, .pos = 0, .label = g->label};
    const unsigned char *magic = NULL;
    uint64_t n_t, n_kv;
    pl_status_t st;

    if ((st = s_take(&c, 4, "magic", &magic)))
        return st;
    if (memcmp(magic, PL_GGUF_MAGIC, 4) != 0)
        return pl_error(PL_ERR_INVALID, "%s: not a GGUF file (bad magic)", g->label);
    if ((st = s_u32(&c, "version", &g->version)))
        return st;
    if (g->version != 2 && g->version != 3)
        return pl_error(PL_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 "
                        "are; a big-endian file reads as a huge version)", g->label, g->version);
    if ((st = s_u64(&c, "tensor count", &n_t)) || (st = s_u64(&c, "metadata count", &n_kv)))
        return st;
    if (n_t > PL_GGUF_MAX_TENSORS || n_kv > PL_GGUF_MAX_KVS)
        return pl_error(PL_ERR_RANGE, "%s: %llu tensors and %llu metadata entries (at most %u "
                        "and %u)", g->label, (unsigned long long)n_t, (unsigned long long)n_kv,
                        PL_GGUF_MAX_TENSORS, PL_GGUF_MAX_KVS);
    /* every entry takes at least 8 + 1 + 4 bytes: a count past the end fails before allocating */
    if (n_kv > (c.len - c.pos) / 13 || n_t > (c.len - c.pos) / 25)
        return pl_error(PL_ERR_INVALID, "%s: %llu metadata entries and %llu tensors cannot fit "
                        "in the file's %llu bytes", g->label, (unsigned long long)n_kv,
                        (unsigned long long)n_t, (unsigned long long)c.len);
    g->kvs = calloc(n_kv ? n_kv : 1, sizeof(*g->kvs));
    g->kv_by_key = calloc(n_kv ? n_kv : 1, sizeof(*g->kv_by_key));
    g->tensors = calloc(n_t ? n_t : 1, sizeof(*g->tensors));
    g->t_by_name = calloc(n_t ? n_t : 1, sizeof(*g->t_by_name));
    if (!g->kvs || !g->kv_by_key || !g->tensors || !g->t_by_name)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", g->label);
    for (uint64_t i = 0; i < n_kv; i++) {
        pl_gguf_kv_t *kv = &g->kvs[i];
        g->n_kvs++;
        if ((st = s_name(&c, "metadata key", PL_GGUF_MAX_KEY, &kv->key)) ||
            (st = s_value(&c, kv)))
            return st;
        g->kv_by_key[i] = kv;
    }
    qsort(g->kv_by_key, g->n_kvs, sizeof(*g->kv_by_key), s_kv_cmp);
    for (size_t i = 1; i < g->n_kvs; i++)
        if (strcmp(g->kv_by_key[i - 1]->key, g->kv_by_key[i]->key) == 0)
            return pl_error(PL_ERR_INVALID, "%s: metadata key '%s' appears twice", g->label,
                            g->kv_by_key[i]->key);
    if ((st = s_alignment(g)))
        return st;
    for (uint64_t i = 0; i < n_t; i++) {
        g->n_tensors++;
        if ((st = s_tensor_info(&c, &g->tensors[i])))
            return st;
    }
    g->data_off = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    return s_check_tensors(g);
}

pl_status_t pl_gguf_parse(const char *label, const void *buf, size_t len, pl_gguf_t **g_p)
{
    pl_gguf_t *g = calloc(1, sizeof(*g));
    pl_status_t st;

    if (!g || !(g->label = strdup(label))) {
        free(g);
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", label);
    }
    g->buf = buf;
    g->len = len;
    if ((st = s_parse(g))) {
        pl_gguf_free(&g);
        return st;
    }
    *g_p = g;
    return PL_OK;
}

pl_status_t pl_gguf_open(const char *path, pl_gguf_t **g_p)
{
    struct stat sb;
    void *map;
    pl_gguf_t *g = NULL;
    pl_status_t st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return pl_error(errno == ENOENT ? PL_ERR_NOT_FOUND : PL_ERR_IO, "%s: %s", path,
                        strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size == 0) {
        st = pl_error(PL_ERR_INVALID, "%s: not a non-empty regular file", path);
        close(fd);
        return st;
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return pl_error(PL_ERR_IO, "%s: mmap: %s", path, strerror(errno));
    if ((st = pl_gguf_parse(path, map, (size_t)sb.st_size, &g))) {
        munmap(map, (size_t)sb.st_size);
        return st;
    }
    g->map = map;
    g->map_len = (size_t)sb.st_size;
    pl_log_debug("gguf %s: v%u, %zu metadata entries, %zu tensors", path, g->version, g->n_kvs,
                 g->n_tensors);
    *g_p = g;
    return PL_OK;
}

void pl_gguf_free(pl_gguf_t **g_p)
{
    pl_gguf_t *g = g_p ? *g_p : NULL;
    if (!g)
        return;
    for (size_t i = 0; i < g->n_kvs; i++) {
        free(g->kvs[i].key);
        free(g->kvs[i].str_offs);
    }
    for (size_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].name);
    free(g->kvs);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->t_by_name);
    if (g->map)
        munmap(g->map, g->map_len);
    free(g->label);
    free(g);
    *g_p = NULL;
}

bool pl_gguf_is_file(const char *path)
{
    char magic[4];
    struct stat sb;
    FILE *f;
    bool yes;

    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || !(f = fopen(path, "rb")))
        return false;
    yes = fread(magic, 1, 4, f) == 4 && memcmp(magic, PL_GGUF_MAGIC, 4) == 0;
    fclose(f);
    return yes;
}

const pl_gguf_kv_t *pl_gguf_find(const pl_gguf_t *g, const char *key)
{
    pl_gguf_kv_t k = {.key = (char *)key}, *kp = &k, **hit;
    hit = bsearch(&kp, g->kv_by_key, g->n_kvs, sizeof(*g->kv_by_key), s_kv_cmp);
    return hit ? *hit : NULL;
}

const pl_gguf_tensor_t *pl_gguf_tensor(const pl_gguf_t *g, const char *name)
{
    pl_gguf_tensor_t k = {.name = (char *)name}, *kp = &k, **hit;
    hit = bsearch(&kp, g->t_by_name, g->n_tensors, sizeof(*g->t_by_name), s_t_cmp);
    return hit ? *hit : NULL;
}

const void *pl_gguf_tensor_data(const pl_gguf_t *g, const pl_gguf_tensor_t *t)
{
    return g->buf + g->data_off + t->off;
}

pl_status_t pl_gguf_wtype(uint32_t ggml_type, pl_wtype_t *dt_p)
{
    static const char *const s_other[] = {[3] = "Q4_1", [6] = "Q5_0", [7] = "Q5_1",
                                          [9] = "Q8_1", [10] = "Q2_K", [11] = "Q3_K",
                                          [15] = "Q8_K"};
    for (int dt = 0; dt < (int)PL_WT_COUNT; dt++) {
        if (pl_gguf_ggml_type((pl_wtype_t)dt) == ggml_type) {
            *dt_p = (pl_wtype_t)dt;
            return PL_OK;
        }
    }
    if (ggml_type < PL_ARRAY_SIZE(s_other) && s_other[ggml_type])
        return pl_error(PL_ERR_UNSUPPORTED, "ggml type %s (%u) is not supported (F32, F16, BF16, "
                        "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K are)", s_other[ggml_type], ggml_type);
    return pl_error(PL_ERR_UNSUPPORTED, "unknown ggml type %u", ggml_type);
}

uint32_t pl_gguf_ggml_type(pl_wtype_t dt)
{
    switch (dt) {
    case PL_WT_F32: return 0;
    case PL_WT_F16: return 1;
    case PL_WT_Q4_0: return 2;
    case PL_WT_Q8_0: return 8;
    case PL_WT_Q4_K: return 12;
    case PL_WT_Q5_K: return 13;
    case PL_WT_Q6_K: return 14;
    case PL_WT_BF16: return 30;
    case PL_WT_COUNT: break;
    }
    return UINT32_MAX;
}
