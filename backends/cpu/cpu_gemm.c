/* The GEMM dispatch on the stored weight type: a table of kernels per type and instruction set,
 * the run-time choice of instruction set, the batch-invariant product that decode batches use,
 * and OpenBLAS on converted tiles for whole long sequences. */
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_blas_core.h"
#include "backends/cpu/cpu_pack.h"
#include "backends/cpu/cpu_qdot.h"

#include "common/util.h"

#include <cblas.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void s_gemm_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        const pl_cpu_wmat_t *const *w, float *const *y, int n_w);

/* ---- the table: adding a weight type is one entry ---- */

#if defined(__x86_64__)
#define S_X86(fn) fn
#else
#define S_X86(fn) NULL
#endif
#define S_PATHS(base)                                                                              \
    {                                                                                              \
        base##scalar, S_X86(base##avx2), S_X86(base##avx512)                                       \
    }

static const pl_cpu_wkernel_t s_kernels[PL_WT_COUNT] = {
    [PL_WT_F32] = {.block = S_PATHS(pl_cpu_block_f32_),
                   .pblock = S_PATHS(pl_cpu_pblock_f32_),
                   .wide_one = true},
    [PL_WT_F16] = {.block = S_PATHS(pl_cpu_block_f16_),
                   .pblock = S_PATHS(pl_cpu_pblock_f16_),
                   .wide_one = true,
                   .to_f32 = S_PATHS(pl_cpu_to_f32_f16_)},
    [PL_WT_BF16] = {.block = S_PATHS(pl_cpu_block_bf16_),
                    .pblock = S_PATHS(pl_cpu_pblock_bf16_),
                    .wide_one = true,
                    .to_f32 = S_PATHS(pl_cpu_to_f32_bf16_)},
#define S_QUANT(WT, type)                                                                          \
    [WT] = {.x_bytes = pl_cpu_qx_bytes_##type,                                                     \
            .x_prep = pl_cpu_qx_prep_##type,                                                       \
            .block = S_PATHS(pl_cpu_qblock_##type##_),                                             \
            .wide_one = true}
    S_QUANT(PL_WT_Q8_0, q8_0),
    S_QUANT(PL_WT_Q4_0, q4_0),
    S_QUANT(PL_WT_Q4_K, q4_k),
    S_QUANT(PL_WT_Q5_K, q5_k),
    S_QUANT(PL_WT_Q6_K, q6_k),
#undef S_QUANT
};

const pl_cpu_wkernel_t *pl_cpu_wkernel(pl_wtype_t t)
{
    return (unsigned)t < PL_WT_COUNT && s_kernels[t].block[PL_CPU_ISA_SCALAR] ? &s_kernels[t]
                                                                              : NULL;
}

/* ---- the instruction set ---- */

static int s_isa_cap = PL_CPU_ISA_COUNT - 1;

#if defined(__x86_64__)
/* cpuid leaf 1 ecx, leaf 7 ebx, and the XCR0 state bits the OS must save for the registers:
 * spelled out, as <cpuid.h>'s names differ between gcc and clang (and clang's
 * __builtin_cpu_supports knows no "f16c"). */
#define S_L1_FMA (1u << 12)
#define S_L1_OSXSAVE (1u << 27)
#define S_L1_AVX (1u << 28)
#define S_L1_F16C (1u << 29)
#define S_L7_AVX2 (1u << 5)
#define S_L7_AVX512F (1u << 16)
#define S_L7_AVX512BW (1u << 30)
#define S_L7_AVX512VL (1u << 31)
#define S_XCR0_YMM 0x6u   /* SSE + AVX state */
#define S_XCR0_ZMM 0xe6u  /* and the opmask and both ZMM halves */

static uint64_t s_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}
#endif

/* From cpuid itself, with the OS's consent (XCR0) for the wider registers, as gcc's
 * __builtin_cpu_supports decides: one home for every instruction-set check of the kernels. */
static pl_cpu_isa_t s_isa_detect(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return PL_CPU_ISA_SCALAR;
    unsigned need1 = S_L1_FMA | S_L1_OSXSAVE | S_L1_AVX | S_L1_F16C;
    if ((c & need1) != need1)
        return PL_CPU_ISA_SCALAR;
    uint64_t xcr0 = s_xcr0();
    if ((xcr0 & S_XCR0_YMM) != S_XCR0_YMM || !__get_cpuid_count(7, 0, &a, &b, &c, &d) ||
        !(b & S_L7_AVX2))
        return PL_CPU_ISA_SCALAR;
    unsigned need7 = S_L7_AVX512F | S_L7_AVX512BW | S_L7_AVX512VL;
    if ((b & need7) == need7 && (xcr0 & S_XCR0_ZMM) == S_XCR0_ZMM)
        return PL_CPU_ISA_AVX512;
    return PL_CPU_ISA_AVX2;
#else
    return PL_CPU_ISA_SCALAR;
#endif
}

pl_cpu_isa_t pl_cpu_isa(void)
{
    static int detected = -1; /* racing first calls all store the same value */
    int d = __atomic_load_n(&detected, __ATOMIC_RELAXED);
    if (d < 0) {
        d = (int)s_isa_detect();
        __atomic_store_n(&detected, d, __ATOMIC_RELAXED);
    }
    return (pl_cpu_isa_t)PL_MIN(d, __atomic_load_n(&s_isa_cap, __ATOMIC_RELAXED));
}

void pl_cpu_isa_cap(pl_cpu_isa_t max)
{
    __atomic_store_n(&s_isa_cap, (int)max, __ATOMIC_RELAXED);
}

const char *pl_cpu_isa_name(pl_cpu_isa_t isa)
{
    static const char *const names[PL_CPU_ISA_COUNT] = {"scalar", "avx2", "avx512"};
    return (unsigned)isa < PL_CPU_ISA_COUNT ? names[isa] : "?";
}

/* The kernel slot of the highest instruction set in use that the type has. */
#define S_PICK(k, slot, isa_var)                                                                   \
    ({                                                                                             \
        int i_ = (int)(isa_var);                                                                   \
        while (i_ > 0 && !(k)->slot[i_])                                                           \
            i_--;                                                                                  \
        (k)->slot[i_];                                                                             \
    })

/* ---- typed matrices ---- */

pl_status_t pl_cpu_wmat_from_view(const char *name, const pl_tensor_view_t *v, pl_cpu_wmat_t *m_p)
{
    size_t rb;
    pl_status_t st;

    if (v->ndim != 2 || v->shape[0] < 1 || v->shape[1] < 1 || v->shape[0] > INT32_MAX ||
        v->shape[1] > INT32_MAX)
        return pl_error(PL_ERR_INVALID, "tensor '%s': not a matrix the CPU backend can hold", name);
    if (!pl_cpu_wkernel(v->wtype))
        return pl_error(PL_ERR_UNSUPPORTED, "tensor '%s': weight type %s has no CPU kernel", name,
                        pl_wtype_name(v->wtype));
    if ((st = pl_wtype_row_bytes(v->wtype, v->shape[1], &rb)))
        return pl_error_prefix(st, "tensor '%s': ", name);
    if (rb == 0 || v->nbytes / rb != (size_t)v->shape[0] || v->nbytes % rb != 0)
        return pl_error(PL_ERR_INVALID, "tensor '%s': %zu bytes, but %lld rows of %zu bytes", name,
                        v->nbytes, (long long)v->shape[0], rb);
    *m_p = (pl_cpu_wmat_t){.type = v->wtype,
                           .rows = (int)v->shape[0],
                           .cols = (int)v->shape[1],
                           .row_bytes = rb,
                           .data = v->data};
    return PL_OK;
}

void pl_cpu_wmat_row_f32(const pl_cpu_wmat_t *w, int r, float *dst)
{
    if (w->packed) {
        pl_cpu_pack_row_f32(w, r, dst);
        return;
    }
    pl_wtype_to_f32(w->type, (const unsigned char *)w->data + (size_t)r * w->row_bytes,
                    (size_t)w->cols, dst);
}

void pl_cpu_embed(const pl_cpu_wmat_t *table, const int32_t *ids, int n, float *out)
{
    for (int i = 0; i < n; i++)
        pl_cpu_wmat_row_f32(table, ids[i], out + (size_t)i * table->cols);
}

/* ---- the batch-invariant product ---- */

static _Thread_local float s_acc[PL_CPU_BLOCK_ROWS * PL_CPU_BLOCK_OUTS * 16];

float *pl_cpu_gemm_acc(void);
float *pl_cpu_gemm_acc(void)
{
    return s_acc;
}

/* How a product's weight rows are split into chunks for the pool (guided self-scheduling over
 * the job's weight bytes): a chunk takes 1 / (threads * S_GUIDE) of the bytes still left, between
 * S_CHUNK_MIN_BYTES and S_CHUNK_MAX_BYTES. Big chunks first, so taking one (an atomic add on a
 * shared line) and starting its streams cold cost little beside it; small ones last, so the
 * threads finish within a small chunk of each other instead of one waiting out the other's last
 * big one at every job's end (batch-1 decode runs ~90 jobs a token; on the 1 B model in Q4_K on
 * 2 threads the old 16 equal chunks a matrix left the threads waiting 4.7% of the jobs' time).
 * S_GUIDE and the floor measured best of 2-8 and 32-512 KiB (bench/README.md). The cap keeps a
 * chunk's weights in L2 while a long batch's row groups pass over them. Chunks hold whole 16-row
 * pieces (threads write separate lines of y) and whole PL_CPU_BLOCK_OUTS_ONE blocks where they
 * are larger (so every block of a wide_one kernel pairs rows far apart). */
#define S_GUIDE 2
#define S_CHUNK_MIN_BYTES (128 * 1024)
#define S_CHUNK_MAX_BYTES (1024 * 1024)
/* Matrices one job holds (q, k and v share their input), and chunks its plan holds at most. */
#define S_MAX_MATS 4
#define S_MAX_CHUNKS 512

typedef struct {
    const pl_cpu_wmat_t *w;
    float *y;
    const void *x; /* f32 rows, or prepared rows of x_row bytes */
    size_t x_row;
    const int *rows; /* into x; NULL: 0..n_rows-1 (prepared rows) */
    void (*block)(const void *const *x, int nr, const void *w, size_t rb, int no, int k,
                  float *const *y);
    int outs; /* weight rows per block call */
} s_mat_t;

/* Chunk c of a job: weight rows o_beg..o_end-1 of matrix mat. */
typedef struct {
    int mat, o_beg, o_end;
} s_span_t;

typedef struct {
    s_mat_t m[S_MAX_MATS];
    int n_mats, n_chunks;
    int n_rows;
    const int *out_rows; /* into y; NULL: 0..n_rows-1 */
    s_span_t span[S_MAX_CHUNKS];
} s_job_t;

/* Weight rows o_beg..o_end-1 of one matrix against every activation row. */
static void s_rows(const s_job_t *j, const s_mat_t *m, int o_beg, int o_end)
{
    const pl_cpu_wmat_t *w = m->w;
    const void *xr[PL_CPU_BLOCK_ROWS];
    float *yr[PL_CPU_BLOCK_ROWS];

    for (int r0 = 0; r0 < j->n_rows; r0 += PL_CPU_BLOCK_ROWS) {
        int nr = PL_MIN(PL_CPU_BLOCK_ROWS, j->n_rows - r0);
        for (int o0 = o_beg; o0 < o_end; o0 += m->outs) {
            int no = PL_MIN(m->outs, o_end - o0);
            for (int r = 0; r < nr; r++) {
                size_t xi = m->rows ? (size_t)m->rows[r0 + r] : (size_t)(r0 + r);
                xr[r] = (const unsigned char *)m->x + xi * m->x_row;
                size_t yi = j->out_rows ? (size_t)j->out_rows[r0 + r] : (size_t)(r0 + r);
                yr[r] = m->y + yi * w->rows + o0;
            }
            m->block(xr, nr, (const unsigned char *)w->data + (size_t)o0 * w->row_bytes,
                     w->row_bytes, no, w->cols, yr);
        }
    }
}

static void s_chunk(void *arg, int c)
{
    const s_job_t *j = arg;
    const s_span_t *sp = &j->span[c];
    s_rows(j, &j->m[sp->mat], sp->o_beg, sp->o_end);
}

/* Weight rows of a chunk that takes about `want` bytes of rows of rb bytes: at least 16, whole
 * 16-row pieces, whole PL_CPU_BLOCK_OUTS_ONE blocks past one. */
static int64_t s_chunk_rows(int64_t want, size_t rb)
{
    int64_t rows = (want + (int64_t)rb - 1) / (int64_t)PL_MAX(rb, 1);
    int64_t unit = rows > PL_CPU_BLOCK_OUTS_ONE ? PL_CPU_BLOCK_OUTS_ONE : 16;
    return PL_MAX(16, (rows + unit - 1) / unit * unit);
}

/* The job's chunks, in matrix order (the pool hands them out in index order, so the sizes fall
 * as the job goes on). One thread: chunks of the cap, which only keep a long batch's weights
 * cached. A huge job raises the cap so its chunks fit the plan. */
static void s_plan(s_job_t *j, int threads)
{
    int64_t left = 0;
    for (int i = 0; i < j->n_mats; i++)
        left += (int64_t)j->m[i].w->rows * (int64_t)j->m[i].w->row_bytes;
    int64_t cap = PL_MAX(S_CHUNK_MAX_BYTES, left / (S_MAX_CHUNKS / 4));
    j->n_chunks = 0;
    for (int i = 0; i < j->n_mats; i++) {
        const pl_cpu_wmat_t *w = j->m[i].w;
        for (int o = 0; o < w->rows;) {
            int64_t want = threads > 1 ? left / ((int64_t)threads * S_GUIDE) : cap;
            int64_t rows = s_chunk_rows(PL_MIN(PL_MAX(want, S_CHUNK_MIN_BYTES), cap), w->row_bytes);
            /* the plan nearly full (many threads): the rest of each matrix one chunk */
            if (j->n_chunks >= S_MAX_CHUNKS - S_MAX_MATS || rows >= w->rows - o)
                rows = w->rows - o;
            j->span[j->n_chunks++] = (s_span_t){.mat = i, .o_beg = o, .o_end = o + (int)rows};
            left -= rows * (int64_t)w->row_bytes;
            o += (int)rows;
        }
    }
}

void pl_cpu_gemm_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                      const pl_cpu_wmat_t *w, float *y)
{
    s_gemm_rows(pool, x, rows, n_rows, &w, &y, 1);
}

void pl_cpu_gemm_rows_n(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        const pl_cpu_wmat_t *const *w, float *const *y, int n_w)
{
    for (int i = 0; i < n_w; i += S_MAX_MATS)
        s_gemm_rows(pool, x, rows, n_rows, w + i, y + i, PL_MIN(S_MAX_MATS, n_w - i));
}

static void s_gemm_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        const pl_cpu_wmat_t *const *w, float *const *y, int n_w)
{
    pl_cpu_isa_t isa = pl_cpu_isa();
    int threads = pl_cpu_pool_size(pool);
    s_job_t job = {.n_rows = n_rows, .out_rows = rows};
    unsigned char *prep[S_MAX_MATS] = {NULL};
    int64_t work = 0;

    if (n_rows <= 0)
        return;
    for (int i = 0; i < n_w; i++) {
        const pl_cpu_wkernel_t *k = pl_cpu_wkernel(w[i]->type);
        s_mat_t *m = &job.m[job.n_mats];
        if (w[i]->rows <= 0)
            continue;
        *m = (s_mat_t){.w = w[i],
                       .y = y[i],
                       .x = x,
                       .x_row = (size_t)w[i]->cols * sizeof(float),
                       .rows = rows,
                       .block = w[i]->packed ? S_PICK(k, pblock, isa) : S_PICK(k, block, isa),
                       .outs = n_rows == 1 && k->wide_one ? PL_CPU_BLOCK_OUTS_ONE
                                                          : PL_CPU_BLOCK_OUTS};
        if (k->x_bytes) { /* activations in the form the type's kernel reads, once per job */
            size_t xb = k->x_bytes(w[i]->cols);
            int same = -1;
            for (int p = 0; p < job.n_mats && same < 0; p++)
                if (pl_cpu_wkernel(job.m[p].w->type)->x_prep == k->x_prep &&
                    job.m[p].w->cols == w[i]->cols)
                    same = p;
            if (same >= 0) {
                m->x = job.m[same].x;
            } else {
                prep[job.n_mats] = malloc(xb * (size_t)n_rows);
                if (!prep[job.n_mats])
                    abort(); /* a few KiB per row: no recovery worth having */
                for (int r = 0; r < n_rows; r++)
                    k->x_prep(x + (size_t)(rows ? rows[r] : r) * w[i]->cols, w[i]->cols,
                              prep[job.n_mats] + xb * (size_t)r);
                m->x = prep[job.n_mats];
            }
            m->x_row = xb;
            m->rows = NULL;
        }
        work += (int64_t)n_rows * w[i]->rows * w[i]->cols;
        job.n_mats++;
    }
    s_plan(&job, threads);
    /* small products are not worth waking the workers; the result is the same either way */
    pl_cpu_pool_chunks(work < (1 << 16) ? NULL : pool, job.n_chunks, s_chunk, &job);
    for (int i = 0; i < job.n_mats; i++)
        free(prep[i]);
}

void pl_cpu_matmul_rows(pl_cpu_pool_t *pool, const float *x, const int *rows, int n_rows,
                        int in_dim, const float *w, int out_dim, float *y)
{
    pl_cpu_wmat_t m = {.type = PL_WT_F32,
                       .rows = out_dim,
                       .cols = in_dim,
                       .row_bytes = (size_t)in_dim * sizeof(float),
                       .data = w};
    pl_cpu_gemm_rows(pool, x, rows, n_rows, &m, y);
}

/* ---- whole sequences: OpenBLAS, unless it runs generic code here ---- */

static int s_seq_blas = -1;

void pl_cpu_gemm_seq_force(int use_blas)
{
    __atomic_store_n(&s_seq_blas, use_blas < 0 ? -1 : use_blas > 0, __ATOMIC_RELAXED);
}

bool pl_cpu_gemm_seq_uses_blas(void)
{
    int forced = __atomic_load_n(&s_seq_blas, __ATOMIC_RELAXED);
    if (forced >= 0)
        return forced;
    return pl_cpu_isa() == PL_CPU_ISA_SCALAR || pl_cpu_blas_core_tuned();
}

/* One sequence's OpenBLAS product, cut into PL_CPU_TILE_ROWS weight rows that the pool's parts
 * take in turn: each tile one single-threaded sgemm of the same shape whatever the thread count
 * (OpenBLAS's own threads split a product by their number, and its edge tiles round otherwise). */
typedef struct {
    const float *x;
    int n, K;
    const pl_cpu_wmat_t *w;
    void (*conv)(const void *, size_t, int, int, float *);
    bool in_place; /* f32 weights read where they are */
    float *tile;   /* one PL_CPU_TILE_ROWS x K tile per part */
    float *y;
    int n_tiles, next; /* next: atomic, the next tile to take */
} s_seq_job_t;

static void s_seq_part(void *arg, int part, int n_parts)
{
    s_seq_job_t *j = arg;
    const pl_cpu_wmat_t *w = j->w;
    float *tile = j->in_place ? NULL : j->tile + (size_t)part * PL_CPU_TILE_ROWS * (size_t)j->K;
    int t;
    (void)n_parts;
    while ((t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n_tiles) {
        int o0 = t * PL_CPU_TILE_ROWS, no = PL_MIN(PL_CPU_TILE_ROWS, w->rows - o0);
        const unsigned char *src = (const unsigned char *)w->data + (size_t)o0 * w->row_bytes;
        const float *b = tile;
        if (j->in_place)
            b = (const float *)src;
        else if (j->conv)
            j->conv(src, w->row_bytes, no, j->K, tile);
        else
            for (int r = 0; r < no; r++)
                pl_wtype_to_f32(w->type, src + (size_t)r * w->row_bytes, (size_t)j->K,
                                tile + (size_t)r * j->K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, j->n, no, j->K, 1.0f, j->x, j->K, b,
                    j->K, 0.0f, j->y + o0, w->rows);
    }
}

void pl_cpu_gemm_seq(pl_cpu_pool_t *pool, const float *x, int n, const pl_cpu_wmat_t *w,
                     float *tile, float *y)
{
    const pl_cpu_wkernel_t *k = pl_cpu_wkernel(w->type);

    if (n <= 0 || w->rows <= 0)
        return;
    if (w->packed) { /* laid out for our own kernels at load: nothing to convert or repack */
        s_gemm_rows(pool, x, NULL, n, &w, &y, 1);
        return;
    }
    if (!k->to_f32[PL_CPU_ISA_SCALAR] && w->type != PL_WT_F32) {
        s_gemm_rows(pool, x, NULL, n, &w, &y, 1); /* no tile conversion: the type's own kernel */
        return;
    }
    if (!pl_cpu_gemm_seq_uses_blas()) {
        s_gemm_rows(pool, x, NULL, n, &w, &y, 1);
        return;
    }
    s_seq_job_t j = {.x = x,
                     .n = n,
                     .K = w->cols,
                     .w = w,
                     .conv = S_PICK(k, to_f32, pl_cpu_isa()),
                     .in_place = w->type == PL_WT_F32 && ((uintptr_t)w->data & 3) == 0,
                     .tile = tile,
                     .y = y,
                     .n_tiles = (w->rows + PL_CPU_TILE_ROWS - 1) / PL_CPU_TILE_ROWS};
    pl_cpu_pool_run(j.n_tiles > 1 ? pool : NULL, s_seq_part, &j);
}
