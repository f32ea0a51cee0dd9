/* Clocks, file reads, paths, base64, counter-based random numbers, half-float conversions. */
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

double pl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

pl_status_t pl_file_read(const char *path, size_t max_len, char **buf_p, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    char *buf;
    size_t got;

    if (!f)
        return pl_error(errno == ENOENT ? PL_ERR_NOT_FOUND : PL_ERR_IO, "%s: %s", path,
                        strerror(errno));
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return pl_error(PL_ERR_IO, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size > max_len) {
        fclose(f);
        return pl_error(PL_ERR_RANGE, "%s: %lld bytes, more than the limit of %zu", path,
                        (long long)st.st_size, max_len);
    }
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        fclose(f);
        return pl_error(PL_ERR_NOMEM, "%s: out of memory", path);
    }
    got = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (got != (size_t)st.st_size) {
        free(buf);
        return pl_error(PL_ERR_IO, "%s: short read", path);
    }
    buf[got] = '\0';
    *buf_p = buf;
    if (len_p)
        *len_p = got;
    return PL_OK;
}

pl_status_t pl_path_join(const char *dir, const char *name, char *out, size_t out_len)
{
    int n;
    if (name[0] == '/' || !dir || !dir[0])
        n = snprintf(out, out_len, "%s", name);
    else
        n = snprintf(out, out_len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= out_len)
        return pl_error(PL_ERR_RANGE, "path too long: %s/%s", dir ? dir : "", name);
    return PL_OK;
}

void pl_path_dirname(const char *path, char *out, size_t out_len)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, out_len, ".");
    else if (slash == path)
        snprintf(out, out_len, "/");
    else
        snprintf(out, out_len, "%.*s", (int)(slash - path), path);
}

static const char s_b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *pl_base64_encode(const void *data, size_t len)
{
    const unsigned char *in = data;
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = s_b64[(v >> 18) & 63];
        out[o++] = s_b64[(v >> 12) & 63];
        out[o++] = i + 1 < len ? s_b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? s_b64[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static int s_b64_val(char c)
{
    const char *p = c ? strchr(s_b64, c) : NULL;
    return p ? (int)(p - s_b64) : -1;
}

pl_status_t pl_base64_decode(const char *text, void **data_p, size_t *len_p)
{
    size_t n = strlen(text), o = 0;
    unsigned char *out;
    if (n % 4 != 0)
        return pl_error(PL_ERR_INVALID, "base64: length %zu is not a multiple of 4", n);
    out = malloc(n / 4 * 3 + 1);
    if (!out)
        return pl_error(PL_ERR_NOMEM, "base64: out of memory");
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = text[i + k] == '=' ? 0 : s_b64_val(text[i + k]);
            bool pad_ok = text[i + k] == '=' && i + 4 == n && k >= 2;
            if (v[k] < 0 || (text[i + k] == '=' && !pad_ok)) {
                free(out);
                return pl_error(PL_ERR_INVALID, "base64: bad character at %zu", i + k);
            }
        }
        /* one spelling per value: "x=" padding only as "==" or a final "=", and the bits the
         * padding leaves over all zero */
        if ((text[i + 2] == '=' && (text[i + 3] != '=' || (v[1] & 0xf))) ||
            (text[i + 3] == '=' && text[i + 2] != '=' && (v[2] & 0x3))) {
            free(out);
            return pl_error(PL_ERR_INVALID, "base64: bad padding at %zu", i);
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        out[o++] = (w >> 16) & 0xff;
        if (text[i + 2] != '=')
            out[o++] = (w >> 8) & 0xff;
        if (text[i + 3] != '=')
            out[o++] = w & 0xff;
    }
    *data_p = out;
    *len_p = o;
    return PL_OK;
}

static uint64_t s_splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t pl_rand_u64(uint64_t key, uint64_t counter)
{
    return s_splitmix(s_splitmix(key) ^ s_splitmix(counter + 0x632be59bd9b4e019ULL));
}

float pl_rand_uniform(uint64_t key, uint64_t counter)
{
    return (float)(pl_rand_u64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

uint64_t pl_rand_key(uint64_t a, uint64_t b, uint64_t c)
{
    return s_splitmix(s_splitmix(s_splitmix(a) ^ b) ^ c);
}

float pl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pl_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | (uint32_t)exp << 10 | man >> 13, rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* may carry into the exponent, which is the correct rounding */
    return (uint16_t)h;
}

float pl_bf16_to_f32(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t pl_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
