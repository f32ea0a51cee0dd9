/* bench_prefill_chunk: one CPU stage's prefill of one long prompt whole against the same prompt in
 * chunks (as a pipeline feeds it), and where each chunk size's extra time goes. */
#include "bench/bench_model.h"

#include "backends/backend.h"
#include "backends/cpu/cpu_blas_core.h"
#include "backends/cpu/cpu_gemm.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/cpu_wcopy.h"
#include "common/util.h"
#include "model/model.h"

#include <cblas.h>
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_MAX_SIZES 8
#define S_N_MATS 7

typedef struct {
    const char *model;
    int layers, prompt, reps;
    bool tiles;                      /* the tile-size table too */
    int sizes[S_MAX_SIZES], n_sizes; /* chunk sizes; the prompt's length = whole */
} s_opts_t;

static double s_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- the stage itself: whole against chunked, alternating round by round ---- */

static pl_status_t s_prefill(pl_be_stage_t *stage, const int32_t *ids, int prompt, int chunk,
                             float *out)
{
    pl_status_t st = PL_OK;
    pl_be_stage_free_seq(stage, 0);
    for (int p0 = 0; p0 < prompt && !st; p0 += chunk) {
        int slot = 0, pos0 = p0, n = PL_MIN(chunk, prompt - p0);
        pl_be_batch_t b = {.n_seq = 1, .n_tokens = n, .slot = &slot, .pos0 = &pos0, .n_tok = &n};
        st = pl_be_stage_forward(stage, &b, ids + p0, out);
    }
    return st;
}

/* ---- the parts, as the stage calls them, over the stage's layers ---- */

typedef struct {
    pl_cpu_wmat_t w[S_N_MATS]; /* q k v o gate up down */
} s_layer_t;

typedef struct {
    double gemm, conv, sgemm, att;
} s_parts_t;

static pl_status_t s_load_mats(pl_model_t *model, int layers, s_layer_t *L)
{
    static const char *const names[S_N_MATS] = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    char name[128];
    pl_tensor_view_t v;
    pl_status_t st;
    for (int l = 0; l < layers; l++)
        for (int m = 0; m < S_N_MATS; m++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s.weight", l, names[m]);
            if ((st = pl_model_tensor(model, name, &v)) ||
                (st = pl_cpu_wmat_from_view(name, &v, &L[l].w[m])))
                return st;
        }
    return PL_OK;
}

/* One prompt in chunks of `chunk`, every layer, each part in a pass of its own (so that each
 * finds the caches as the stage leaves them for it): the stage's products (pl_cpu_gemm_seq, bf16
 * tiles converted inside), the tile conversions alone, plain sgemm on weights converted
 * beforehand (f32[l][m]: the products without conversion, from twice the bytes), and the
 * attention against the cached prefix. Thread CPU seconds of each. */
static void s_parts(const pl_model_config_t *c, const s_layer_t *L, float *const *f32, int layers,
                    int prompt, int chunk, float *x, float *y, float *tile, float *kc, float *vc,
                    float *scores, s_parts_t *r)
{
    const pl_cpu_wkernel_t *k = pl_cpu_wkernel(L[0].w[0].type);
    void (*conv)(const void *, size_t, int, int, float *) =
        k->to_f32[pl_cpu_isa()] ? k->to_f32[pl_cpu_isa()] : k->to_f32[PL_CPU_ISA_SCALAR];
    double *part[4] = {&r->gemm, &r->conv, &r->sgemm, &r->att};
    for (int which = 0; which < 4; which++) {
        double t = s_cpu_now();
        for (int p0 = 0; p0 < prompt; p0 += chunk) {
            int n = PL_MIN(chunk, prompt - p0);
            for (int l = 0; l < layers; l++) {
                if (which == 3) {
                    pl_cpu_attention(x, n, p0, kc, vc, c->n_heads, c->n_kv_heads, c->head_dim,
                                     scores, y);
                    continue;
                }
                for (int m = 0; m < S_N_MATS; m++) {
                    const pl_cpu_wmat_t *w = &L[l].w[m];
                    if (which == 0)
                        pl_cpu_gemm_seq(NULL, x, n, w, tile, y);
                    for (int o0 = 0; which == 1 && conv && !w->packed && o0 < w->rows;
                         o0 += PL_CPU_TILE_ROWS)
                        conv((const unsigned char *)w->data + (size_t)o0 * w->row_bytes,
                             w->row_bytes, PL_MIN(PL_CPU_TILE_ROWS, w->rows - o0), w->cols, tile);
                    if (which == 2)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w->rows, w->cols,
                                    1.0f, x, w->cols, f32[l * S_N_MATS + m], w->cols, 0.0f, y,
                                    w->rows);
                }
            }
        }
        *part[which] = s_cpu_now() - t;
    }
}

/* pl_cpu_gemm_seq's loop with `rows` weight rows per converted tile: CPU seconds over the
 * stage's products for one prompt in chunks of `chunk`. */
static double s_tiled(const s_layer_t *L, int layers, int prompt, int chunk, int rows,
                      const float *x, float *y, float *tile)
{
    const pl_cpu_wkernel_t *k = pl_cpu_wkernel(L[0].w[0].type);
    void (*conv)(const void *, size_t, int, int, float *) =
        k->to_f32[pl_cpu_isa()] ? k->to_f32[pl_cpu_isa()] : k->to_f32[PL_CPU_ISA_SCALAR];
    double t = s_cpu_now();
    if (!conv)
        return 0;
    for (int p0 = 0; p0 < prompt; p0 += chunk) {
        int n = PL_MIN(chunk, prompt - p0);
        for (int l = 0; l < layers; l++)
            for (int m = 0; m < S_N_MATS; m++) {
                const pl_cpu_wmat_t *w = &L[l].w[m];
                for (int o0 = 0; o0 < w->rows; o0 += rows) {
                    int no = PL_MIN(rows, w->rows - o0);
                    conv((const unsigned char *)w->data + (size_t)o0 * w->row_bytes, w->row_bytes,
                         no, w->cols, tile);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, no, w->cols, 1.0f, x,
                                w->cols, tile, w->cols, 0.0f, y + o0, w->rows);
                }
            }
    }
    return s_cpu_now() - t;
}

/* ---- the model ---- */

/* bench_pipeline's model, bf16, made by bench_model.h (s_run_mkmodel), removed by s_rmdir */

/* ---- options ---- */

static int s_usage(FILE *f, int rc)
{
    fprintf(f, "usage: bench_prefill_chunk [--model DIR] [--layers N] [--prompt N] "
               "[--chunks 64,128,256,512] [--reps N] [--tiles]\n"
               "  --model   a model directory (default: bench_pipeline's, made here)\n"
               "  --layers  the stage's layers, from layer 0 (default 6: stage 0 of 2)\n"
               "  --prompt  the prompt's tokens (default 1024)\n"
               "  --reps    rounds, each the whole prompt then every chunk size (default 3)\n"
               "  --tiles   also time the products with bf16 tiles of 16..512 weight rows\n");
    return rc;
}

static int s_parse(int argc, char **argv, s_opts_t *o)
{
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},  {"layers", required_argument, NULL, 'l'},
        {"prompt", required_argument, NULL, 'p'}, {"chunks", required_argument, NULL, 'c'},
        {"reps", required_argument, NULL, 'r'},   {"tiles", no_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    int ch;
    *o = (s_opts_t){
        .layers = 6, .prompt = 1024, .reps = 3, .sizes = {64, 128, 256, 512}, .n_sizes = 4};
    while ((ch = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (ch) {
        case 'm':
            o->model = optarg;
            break;
        case 'l':
            o->layers = atoi(optarg);
            break;
        case 'p':
            o->prompt = atoi(optarg);
            break;
        case 'r':
            o->reps = atoi(optarg);
            break;
        case 't':
            o->tiles = true;
            break;
        case 'c': {
            o->n_sizes = 0;
            for (char *s = optarg; *s && o->n_sizes < S_MAX_SIZES;) {
                o->sizes[o->n_sizes++] = atoi(s);
                s += strcspn(s, ",");
                s += *s == ',';
            }
            break;
        }
        case 'h':
            exit(s_usage(stdout, 0));
        default:
            return -1;
        }
    }
    if (optind != argc || o->layers < 1 || o->prompt < 1 || o->reps < 1 || o->n_sizes < 1)
        return -1;
    for (int i = 0; i < o->n_sizes; i++)
        if (o->sizes[i] < 1 || o->sizes[i] > o->prompt)
            return -1;
    return 0;
}

int main(int argc, char **argv)
{
    s_opts_t o;
    char tmp[] = "/tmp/pl-bench-chunk-XXXXXX";
    const char *dir;
    bool made = false;
    pl_model_t *model = NULL;
    pl_be_device_t *dev = NULL;
    pl_be_stage_t *stage = NULL;
    int rc = 1;
    double la[3] = {0};

    pl_cpu_blas_core_fix(argv);
    if (s_parse(argc, argv, &o))
        return s_usage(stderr, 2);
    if (getloadavg(la, 3) < 0)
        la[0] = -1;
    openblas_set_num_threads(1);
    dir = o.model;
    if (!dir) {
        if (!mkdtemp(tmp) || s_run_mkmodel(tmp, "pipeline", "bf16")) {
            fprintf(stderr, "bench_prefill_chunk: could not make a model in %s\n", tmp);
            s_rmdir(tmp);
            return 1;
        }
        dir = tmp;
        made = true;
    }
    if (pl_model_open(dir, &model))
        goto err;
    const pl_model_config_t *c = pl_model_config(model);
    int layers = PL_MIN(o.layers, c->n_layers), P = o.prompt;
    pl_be_stage_params_t sp = {.first_layer = 0,
                               .last_layer = layers - 1,
                               .has_embed = true,
                               .max_seqs = 1,
                               .max_ctx = P,
                               .max_tokens = P};
    int32_t *ids = malloc((size_t)P * sizeof(int32_t));
    float *out = malloc((size_t)P * c->hidden * sizeof(float));
    if (!ids || !out || pl_be_device_open(pl_be_cpu(), 0, 1, &dev) ||
        pl_be_stage_load(dev, model, &sp, &stage))
        goto err_free;
    for (int i = 0; i < P; i++)
        ids[i] = (int32_t)(3 + pl_rand_u64(13, (uint64_t)i) % (uint64_t)(c->vocab - 3));
    printf("bench_prefill_chunk: %d-token prompt through one CPU stage of layers 0..%d of %s "
           "(hidden %d, intermediate %d, heads %d/%d), 1 thread, OpenBLAS core %s, products "
           "through %s; load average %.2f at the start\n\n",
           P, layers - 1, dir, c->hidden, c->intermediate, c->n_heads, c->n_kv_heads,
           openblas_get_corename(), pl_cpu_wcopy_wanted() && pl_cpu_wcopy_pack_wanted()
               ? "the packed kernels (float weights packed at load)"
           : pl_cpu_gemm_seq_uses_blas() ? "OpenBLAS"
                                         : "own kernel",
           la[0]);

    /* the stage: rounds of the whole prompt then every chunk size, best CPU time of each */
    int n = o.n_sizes + 1;
    double best[S_MAX_SIZES + 1], best_wall[S_MAX_SIZES + 1];
    for (int i = 0; i < n; i++)
        best[i] = best_wall[i] = 1e30;
    if (s_prefill(stage, ids, P, P, out)) /* warm-up */
        goto err_free;
    for (int r = 0; r < o.reps; r++)
        for (int i = 0; i < n; i++) {
            int chunk = i == 0 ? P : o.sizes[i - 1];
            double t0 = pl_now(), c0 = s_cpu_now();
            if (s_prefill(stage, ids, P, chunk, out))
                goto err_free;
            best[i] = PL_MIN(best[i], s_cpu_now() - c0);
            best_wall[i] = PL_MIN(best_wall[i], pl_now() - t0);
        }
    pl_be_stage_unload(&stage);
    printf(
        "| prefill of %d tokens, layers 0..%d | calls | CPU s (best of %d) | wall s | x whole |\n"
        "| --- | ---: | ---: | ---: | ---: |\n",
        P, layers - 1, o.reps);
    for (int i = 0; i < n; i++) {
        int chunk = i == 0 ? P : o.sizes[i - 1];
        printf("| %s %d | %d | %.3f | %.3f | %.2f |\n", i == 0 ? "whole," : "chunks of", chunk,
               (P + chunk - 1) / chunk, best[i], best_wall[i], best[i] / best[0]);
    }

    fflush(stdout);
    /* the parts: the same calls on the stage's own weights */
    s_layer_t *L = calloc((size_t)layers, sizeof(*L));
    float **f32 = calloc((size_t)layers * S_N_MATS, sizeof(float *));
    int kmax = PL_MAX(c->hidden, c->intermediate), nmax = kmax;
    size_t kv = (size_t)P * c->n_kv_heads * c->head_dim;
    float *x = malloc((size_t)P * kmax * sizeof(float)), *y = malloc((size_t)P * nmax * 4);
    float *tile = malloc((size_t)PL_CPU_TILE_ROWS * kmax * 4), *kc = malloc(kv * 4),
          *vc = malloc(kv * 4), *scores = malloc((size_t)PL_CPU_ATT_ROWS * P * 4);
    pl_cpu_wcopy_t wc = {0};
    pl_cpu_wmat_t **mats = calloc((size_t)layers * S_N_MATS, sizeof(*mats));
    if (!L || !f32 || !x || !y || !tile || !kc || !vc || !scores || !mats ||
        s_load_mats(model, layers, L))
        goto err_parts;
    for (int i = 0; i < layers * S_N_MATS; i++) /* as the stage holds them: huge pages */
        mats[i] = &L[i / S_N_MATS].w[i % S_N_MATS];
    if (pl_cpu_wcopy_wanted() &&
        pl_cpu_wcopy_make(mats, layers * S_N_MATS, pl_cpu_wcopy_pack_wanted(), &wc))
        goto err_parts;
    for (size_t i = 0; i < (size_t)P * kmax; i++)
        x[i] = pl_rand_uniform(1, i) - 0.5f;
    for (size_t i = 0; i < kv; i++)
        kc[i] = pl_rand_uniform(2, i) - 0.5f, vc[i] = pl_rand_uniform(3, i) - 0.5f;
    for (int l = 0; l < layers; l++)
        for (int m = 0; m < S_N_MATS; m++) {
            const pl_cpu_wmat_t *w = &L[l].w[m];
            float *f = malloc((size_t)w->rows * w->cols * sizeof(float));
            if (!(f32[l * S_N_MATS + m] = f))
                goto err_parts;
            for (int r = 0; r < w->rows; r++)
                pl_cpu_wmat_row_f32(w, r, f + (size_t)r * w->cols);
        }
    s_parts_t parts[S_MAX_SIZES + 1];
    for (int i = 0; i < n; i++)
        parts[i] = (s_parts_t){1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < PL_MAX(2, o.reps); r++)
        for (int i = 0; i < n; i++) {
            s_parts_t p;
            s_parts(c, L, f32, layers, P, i == 0 ? P : o.sizes[i - 1], x, y, tile, kc, vc, scores,
                    &p);
            parts[i].gemm = PL_MIN(parts[i].gemm, p.gemm);
            parts[i].conv = PL_MIN(parts[i].conv, p.conv);
            parts[i].sgemm = PL_MIN(parts[i].sgemm, p.sgemm);
            parts[i].att = PL_MIN(parts[i].att, p.att);
        }
    printf("\nweights %s (PL_CPU_WEIGHTS=plain: as stored, sgemm on converted tiles)\n",
           L[0].w[0].packed ? "packed at load, the packed kernels (cpu_pack.h)" : "as stored");
    printf("\n| where it goes, CPU s (best of %d) | products as the stage runs them "
           "(pl_cpu_gemm_seq) | of which bf16 -> f32 tile conversion | sgemm on f32 weights "
           "converted beforehand, one call per matrix | attention vs the cached prefix | the "
           "rest of the stage (norms, RoPE, SwiGLU, KV appends, copies) |\n"
           "| --- | ---: | ---: | ---: | ---: | ---: |\n",
           PL_MAX(2, o.reps));
    for (int i = 0; i < n; i++) {
        int chunk = i == 0 ? P : o.sizes[i - 1];
        printf("| %s %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", i == 0 ? "whole," : "chunks of",
               chunk, parts[i].gemm, parts[i].conv, parts[i].sgemm, parts[i].att,
               best[i] - parts[i].gemm - parts[i].att);
    }
    fflush(stdout);
    /* the tile's size: conversion and product of each tile back to back */
    static const int tile_rows[] = {16, 32, 64, 128, 256, 512};
    float *big = o.tiles ? malloc((size_t)512 * kmax * sizeof(float)) : NULL;
    if (!big)
        goto done;
    printf("\n| products, bf16 converted by tiles of N weight rows, CPU s (best of 2) |");
    for (size_t j = 0; j < PL_ARRAY_SIZE(tile_rows); j++)
        printf(" %d |", tile_rows[j]);
    printf("\n| --- |");
    for (size_t j = 0; j < PL_ARRAY_SIZE(tile_rows); j++)
        printf(" ---: |");
    printf("\n");
    for (int i = 0; i < n; i++) {
        int chunk = i == 0 ? P : o.sizes[i - 1];
        printf("| %s %d |", i == 0 ? "whole," : "chunks of", chunk);
        for (size_t j = 0; j < PL_ARRAY_SIZE(tile_rows); j++) {
            double b = 1e30;
            for (int r = 0; r < 2; r++)
                b = PL_MIN(b, s_tiled(L, layers, P, chunk, tile_rows[j], x, y, big));
            printf(" %.3f |", b);
        }
        printf("\n");
    }
    free(big);
done:;
    double la1[3] = {0};
    if (getloadavg(la1, 3) < 0)
        la1[0] = -1;
    printf("\nload average %.2f at the end (figures measured under load when it is well above "
           "1)\n",
           la1[0]);
    rc = 0;
err_parts:
    pl_cpu_wcopy_free(&wc);
    free(mats);
    for (int i = 0; f32 && i < layers * S_N_MATS; i++)
        free(f32[i]);
    free(f32);
    free(L);
    free(x);
    free(y);
    free(tile);
    free(kc);
    free(vc);
    free(scores);
err_free:
    free(ids);
    free(out);
err:
    if (rc)
        fprintf(stderr, "bench_prefill_chunk: %s\n", pl_error_msg());
    pl_be_stage_unload(&stage);
    pl_be_device_close(&dev);
    pl_model_destroy(&model);
    if (made)
        s_rmdir(tmp);
    return rc;
}
