/* safetensors shards: header validation (sizes, dtypes, shapes, offsets, overlaps) and the lazy
 * read-only mapping of the data. Nothing in a header is trusted before it is checked. */
#include "model/safetensors.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void pl_st_header_free(pl_st_header_t *hdr)
{
    if (!hdr)
        return;
    for (size_t i = 0; i < hdr->n_entries; i++)
        free(hdr->entries[i].name);
    free(hdr->entries);
    hdr->entries = NULL;
    hdr->n_entries = 0;
}

static pl_status_t s_json_u64(const char *label, const char *name, const char *field,
                              json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': %s must hold non-negative integers",
                        label, name, field);
    *out = (uint64_t)json_integer_value(v);
    return PL_OK;
}

/* Fill one entry from the header's object for `name`; checks everything but overlaps. */
static pl_status_t s_entry_parse(const char *label, const char *name, json_t *obj,
                                 uint64_t data_size, pl_st_entry_t *e)
{
    json_t *dtype = json_object_get(obj, "dtype");
    json_t *shape = json_object_get(obj, "shape");
    json_t *offs = json_object_get(obj, "data_offsets");
    uint64_t numel = 1, nbytes, dim = 0;
    pl_status_t st;

    if (!json_is_object(obj))
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': expected an object", label, name);
    if (strlen(name) > PL_ST_MAX_NAME)
        return pl_error(PL_ERR_RANGE, "%s: tensor name longer than %u bytes", label,
                        PL_ST_MAX_NAME);
    if (!json_is_string(dtype))
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': field 'dtype' missing or not a string",
                        label, name);
    if (pl_dtype_parse(json_string_value(dtype), &e->dtype) != PL_OK)
        return pl_error(PL_ERR_UNSUPPORTED, "%s: tensor '%s': dtype '%.16s' is not supported "
                        "(F32, F16, BF16 are)", label, name, json_string_value(dtype));
    if (!json_is_array(shape))
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': field 'shape' missing or not an array",
                        label, name);
    if (json_array_size(shape) > 4)
        return pl_error(PL_ERR_UNSUPPORTED, "%s: tensor '%s': %zu dimensions, at most 4 allowed",
                        label, name, json_array_size(shape));
    e->ndim = (int)json_array_size(shape);
    for (int d = 0; d < e->ndim; d++) {
        st = s_json_u64(label, name, "shape", json_array_get(shape, (size_t)d), &dim);
        if (st)
            return st;
        if (dim > INT64_MAX || __builtin_mul_overflow(numel, dim, &numel) || numel > INT64_MAX)
            return pl_error(PL_ERR_RANGE, "%s: tensor '%s': shape overflows", label, name);
        e->shape[d] = (int64_t)dim;
    }
    for (int d = e->ndim; d < 4; d++)
        e->shape[d] = 1;
    e->numel = (int64_t)numel;
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': field 'data_offsets' must be "
                        "[begin, end]", label, name);
    st = s_json_u64(label, name, "data_offsets", json_array_get(offs, 0), &e->begin);
    if (!st)
        st = s_json_u64(label, name, "data_offsets", json_array_get(offs, 1), &e->end);
    if (st)
        return st;
    if (e->end < e->begin)
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': data_offsets end %llu before begin %llu",
                        label, name, (unsigned long long)e->end, (unsigned long long)e->begin);
    if (__builtin_mul_overflow(numel, (uint64_t)pl_dtype_size(e->dtype), &nbytes) ||
        e->end - e->begin != nbytes)
        return pl_error(PL_ERR_INVALID, "%s: tensor '%s': data_offsets span %llu bytes but "
                        "shape and dtype need %llu", label, name,
                        (unsigned long long)(e->end - e->begin), (unsigned long long)nbytes);
    if (e->end > data_size)
        return pl_error(PL_ERR_RANGE, "%s: truncated or corrupt: tensor '%s' ends at data byte "
                        "%llu, the file has %llu data bytes", label, name,
                        (unsigned long long)e->end, (unsigned long long)data_size);
    return PL_OK;
}

static int s_by_begin(const void *a, const void *b)
{
    const pl_st_entry_t *x = *(pl_st_entry_t *const *)a, *y = *(pl_st_entry_t *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static pl_status_t s_check_overlaps(const char *label, pl_st_header_t *hdr)
{
    pl_st_entry_t **order;
    const pl_st_entry_t *prev = NULL;

    if (hdr->n_entries < 2)
        return PL_OK;
    order = malloc(hdr->n_entries * sizeof(*order));
    if (!order)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", label);
    for (size_t i = 0; i < hdr->n_entries; i++)
        order[i] = &hdr->entries[i];
    qsort(order, hdr->n_entries, sizeof(*order), s_by_begin);
    for (size_t i = 0; i < hdr->n_entries; i++) {
        if (order[i]->begin == order[i]->end)
            continue; /* empty tensors take no room */
        if (prev && order[i]->begin < prev->end) {
            pl_status_t st = pl_error(PL_ERR_INVALID, "%s: tensors '%s' and '%s' overlap",
                                      label, prev->name, order[i]->name);
            free(order);
            return st;
        }
        prev = order[i];
    }
    free(order);
    return PL_OK;
}

pl_status_t pl_st_header_parse(const char *label, const char *json, size_t json_len,
                               uint64_t data_size, pl_st_header_t *hdr)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &jerr), *value;
    pl_st_header_t h = {0};
    const char *key;
    pl_status_t st;

    if (!root)
        return pl_error(PL_ERR_INVALID, "%s: header is not valid JSON: %s (byte %d)", label,
                        jerr.text, jerr.position);
    if (!json_is_object(root)) {
        st = pl_error(PL_ERR_INVALID, "%s: header is not a JSON object", label);
        goto err_root;
    }
    if (json_object_size(root) > PL_ST_MAX_TENSORS) {
        st = pl_error(PL_ERR_RANGE, "%s: more than %u tensors", label, PL_ST_MAX_TENSORS);
        goto err_root;
    }
    h.entries = calloc(json_object_size(root) + 1, sizeof(*h.entries));
    if (!h.entries) {
        st = pl_error(PL_ERR_NOMEM, "%s: out of memory", label);
        goto err_root;
    }
    json_object_foreach(root, key, value) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(value)) {
                st = pl_error(PL_ERR_INVALID, "%s: '__metadata__' is not an object", label);
                goto err_entries;
            }
            continue;
        }
        pl_st_entry_t *e = &h.entries[h.n_entries];
        st = s_entry_parse(label, key, value, data_size, e);
        if (st)
            goto err_entries;
        e->name = strdup(key);
        if (!e->name) {
            st = pl_error(PL_ERR_NOMEM, "%s: out of memory", label);
            goto err_entries;
        }
        h.n_entries++;
    }
    st = s_check_overlaps(label, &h);
    if (st)
        goto err_entries;
    json_decref(root);
    *hdr = h;
    return PL_OK;

err_entries:
    pl_st_header_free(&h);
err_root:
    json_decref(root);
    return st;
}

static uint64_t s_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Check the length prefix against the file size; *hlen_p is the JSON header length. */
static pl_status_t s_check_prefix(const char *label, const unsigned char prefix[8],
                                  uint64_t file_size, uint64_t *hlen_p)
{
    uint64_t n = s_le64(prefix);
    if (n > PL_ST_MAX_HEADER)
        return pl_error(PL_ERR_RANGE, "%s: header length %llu exceeds the %u-byte limit", label,
                        (unsigned long long)n, PL_ST_MAX_HEADER);
    if (n > file_size - 8)
        return pl_error(PL_ERR_INVALID, "%s: truncated: header says %llu bytes, file has %llu",
                        label, (unsigned long long)n, (unsigned long long)file_size);
    *hlen_p = n;
    return PL_OK;
}

pl_status_t pl_st_parse_buffer(const char *label, const void *buf, size_t len,
                               pl_st_header_t *hdr)
{
    const unsigned char *p = buf;
    uint64_t n = 0;
    pl_status_t st;

    if (len < 8)
        return pl_error(PL_ERR_INVALID, "%s: truncated: %zu bytes, less than the 8-byte header "
                        "length", label, len);
    st = s_check_prefix(label, p, len, &n);
    if (st)
        return st;
    st = pl_st_header_parse(label, (const char *)p + 8, (size_t)n, len - 8 - n, hdr);
    if (st)
        return st;
    hdr->data_off = 8 + n;
    return PL_OK;
}

static pl_status_t s_pread_all(const char *path, int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return pl_error(PL_ERR_IO, "%s: read: %s", path, strerror(errno));
        if (r == 0)
            return pl_error(PL_ERR_IO, "%s: file shrank while reading", path);
        got += (size_t)r;
    }
    return PL_OK;
}

pl_status_t pl_st_open(const char *path, pl_st_file_t **file_p)
{
    unsigned char prefix[8];
    struct stat sb;
    uint64_t n = 0;
    char *json = NULL;
    pl_st_file_t *f = calloc(1, sizeof(*f));
    pl_status_t st;

    if (!f)
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", path);
    f->path = strdup(path);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (!f->path) {
        st = pl_error(PL_ERR_NOMEM, "%s: out of memory", path);
        goto err_fd;
    }
    if (f->fd < 0) {
        st = pl_error(errno == ENOENT ? PL_ERR_NOT_FOUND : PL_ERR_IO, "%s: %s", path,
                      strerror(errno));
        goto err_fd;
    }
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = pl_error(PL_ERR_IO, "%s: not a regular file", path);
        goto err_fd;
    }
    f->file_size = (uint64_t)sb.st_size;
    if (f->file_size < 8) {
        st = pl_error(PL_ERR_INVALID, "%s: truncated: %llu bytes, less than the 8-byte header "
                      "length", path, (unsigned long long)f->file_size);
        goto err_fd;
    }
    st = s_pread_all(path, f->fd, prefix, 8, 0);
    if (!st)
        st = s_check_prefix(path, prefix, f->file_size, &n);
    if (st)
        goto err_fd;
    json = malloc(n ? n : 1);
    if (!json) {
        st = pl_error(PL_ERR_NOMEM, "%s: out of memory for a %llu-byte header", path,
                      (unsigned long long)n);
        goto err_fd;
    }
    st = s_pread_all(path, f->fd, json, (size_t)n, 8);
    if (!st)
        st = pl_st_header_parse(path, json, (size_t)n, f->file_size - 8 - n, &f->hdr);
    free(json);
    if (st)
        goto err_fd;
    f->hdr.data_off = 8 + n;
    pthread_mutex_init(&f->lock, NULL);
    *file_p = f;
    return PL_OK;

err_fd:
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f);
    return st;
}

pl_status_t pl_st_data(pl_st_file_t *file, const unsigned char **data_p)
{
    pl_status_t st = PL_OK;
    struct stat sb;

    pthread_mutex_lock(&file->lock);
    if (!file->map) {
        /* A file cut short after open would raise SIGBUS on access, so look again first. */
        if (fstat(file->fd, &sb) != 0 || (uint64_t)sb.st_size < file->file_size) {
            st = pl_error(PL_ERR_IO, "%s: file shrank since it was opened", file->path);
            goto out;
        }
        void *m = mmap(NULL, (size_t)file->file_size, PROT_READ, MAP_PRIVATE, file->fd, 0);
        if (m == MAP_FAILED) {
            st = pl_error(PL_ERR_IO, "%s: mmap: %s", file->path, strerror(errno));
            goto out;
        }
        file->map = m;
        file->map_len = (size_t)file->file_size;
        close(file->fd);
        file->fd = -1;
        pl_log_debug("mapped %s (%zu bytes)", file->path, file->map_len);
    }
    *data_p = (const unsigned char *)file->map + file->hdr.data_off;
out:
    pthread_mutex_unlock(&file->lock);
    return st;
}

void pl_st_close(pl_st_file_t **file_p)
{
    pl_st_file_t *f = file_p ? *file_p : NULL;
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_len);
    if (f->fd >= 0)
        close(f->fd);
    pthread_mutex_destroy(&f->lock);
    pl_st_header_free(&f->hdr);
    free(f->path);
    free(f);
    *file_p = NULL;
}
