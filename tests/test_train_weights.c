/* Tests of a training stage's master weights (pipeline/train_weights.c): a checkpoint of known
 * weights read back per stage gives exactly those weights; a tied model's head starts as its
 * embedding; random weights are the same whatever the split and follow the stated init; the
 * trainer's shape comes from config.json and what the trainer lacks is refused by name. */
#include "pipeline/train_ckpt.h"
#include "pipeline/train_weights.h"
#include "train_util.h"

#include <stdio.h>
#include <unistd.h>

static void s_mkmodel(const char *dir, const char *extra)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "%s/pl-mkmodel --out %s --layers %d --hidden %d --intermediate %d --heads %d "
             "--kv-heads %d --head-dim %d --vocab %d %s >/dev/null",
             PL_BIN_DIR, dir, L, g_d.hidden, g_d.inter, g_d.n_heads, g_d.n_kv, g_d.head_dim, V,
             extra);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static void s_rmrf(const char *dir)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static bool s_eq(const float *a, const float *b, size_t n)
{
    return a && b && !memcmp(a, b, n * sizeof(float));
}

Test(train_weights, each_stage_reads_back_the_checkpointed_weights, .timeout = 60)
{
    char src[] = "/tmp/pl_tw_src_XXXXXX", dir[] = "/tmp/pl_tw_ck_XXXXXX";
    cr_assert_not_null(mkdtemp(src));
    cr_assert_not_null(mkdtemp(dir));
    s_mkmodel(src, "");
    model_t m;
    model_make(&m, 7);
    pl_train_local_cfg_t c = cfg_make(0, false);
    const int counts[2] = {1, 2};
    cr_assert_eq(pl_train_ckpt_stage_write(dir, &c, &m.w, 0, 2, 0, 1), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_train_ckpt_stage_write(dir, &c, &m.w, 1, 2, 1, 3), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_train_ckpt_index_write(dir, &c, counts, 2, src), PL_OK, "%s", pl_error_msg());

    pl_model_t *pm = NULL;
    cr_assert_eq(pl_model_open(dir, &pm), PL_OK, "%s", pl_error_msg());
    double inv[2];
    pl_train_local_cfg_t lc = {.opt = c.opt};
    cr_assert_eq(pl_train_cfg_from_model(pl_model_config(pm), T, MB, inv, &lc), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(memcmp(&lc.dims, &g_d, sizeof(g_d)), 0, "dims from config.json");
    cr_assert_eq(lc.n_layers, L);
    cr_assert_eq(lc.vocab, V);
    cr_assert_eq(lc.seq_len, T);
    cr_assert_eq(lc.n_mb, MB);
    cr_assert_eq(lc.inv_freq, inv);
    cr_assert_eq(lc.opt.lr, c.opt.lr, "the optimizer settings are left as they were");

    size_t sz[9], H = (size_t)g_d.hidden;
    pl_cpu_tlayer_sizes(&g_d, sz);
    pl_train_master_t *a = NULL, *b = NULL;
    cr_assert_eq(pl_train_master_load(pm, &lc, 0, 1, true, false, &a), PL_OK, "%s",
                 pl_error_msg());
    cr_assert_eq(pl_train_master_load(pm, &lc, 1, 3, false, true, &b), PL_OK, "%s",
                 pl_error_msg());
    pl_train_weights_t *wa = pl_train_master_weights(a), *wb = pl_train_master_weights(b);
    cr_assert(s_eq(wa->embed, m.embed, V * H));
    cr_assert_null(wa->head);
    cr_assert_null(wa->final_norm);
    cr_assert_null(wb->embed);
    cr_assert(s_eq(wb->final_norm, m.norm, H));
    cr_assert(s_eq(wb->head, m.head, V * H));
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++) {
            pl_train_weights_t *w = l < 1 ? wa : wb, *other = l < 1 ? wb : wa;
            cr_assert(s_eq(*pl_cpu_tlayer_field(&w->layers[l], i),
                           *pl_cpu_tlayer_field(&m.layers[l], i), sz[i]),
                      "layer %d field %d", l, i);
            cr_assert_null(*pl_cpu_tlayer_field(&other->layers[l], i), "not the stage's");
        }
    /* the master is a copy: writing it leaves the model's mapping alone */
    wb->head[0] += 1.0f;
    pl_train_master_destroy(&a);
    pl_train_master_destroy(&b);
    cr_assert_null(a);
    pl_train_master_destroy(&b);

    /* shapes are checked against the trainer's config */
    pl_train_local_cfg_t wrong = lc;
    wrong.dims.inter = 2 * g_d.inter;
    cr_assert_eq(pl_train_master_load(pm, &wrong, 0, 1, true, false, &a), PL_ERR_INVALID, "%s",
                 pl_error_msg());
    cr_assert_null(a);
    cr_assert(strstr(pl_error_msg(), "mlp.gate_proj"), "%s", pl_error_msg());
    cr_assert_eq(pl_train_master_load(pm, &lc, 2, 4, false, true, &a), PL_ERR_INVALID);
    pl_model_destroy(&pm);
    model_free(&m);
    s_rmrf(src);
    s_rmrf(dir);
}

Test(train_weights, tied_model_head_starts_as_its_embedding, .timeout = 60)
{
    char src[] = "/tmp/pl_tw_tied_XXXXXX";
    cr_assert_not_null(mkdtemp(src));
    s_mkmodel(src, "--tie --dtype bf16");
    pl_model_t *pm = NULL;
    cr_assert_eq(pl_model_open(src, &pm), PL_OK, "%s", pl_error_msg());
    double inv[2];
    pl_train_local_cfg_t lc = {0};
    cr_assert_eq(pl_train_cfg_from_model(pl_model_config(pm), T, MB, inv, &lc), PL_OK);
    pl_train_master_t *t = NULL;
    cr_assert_eq(pl_train_master_load(pm, &lc, 0, L, true, true, &t), PL_OK, "%s",
                 pl_error_msg());
    pl_train_weights_t *w = pl_train_master_weights(t);
    size_t n = (size_t)V * g_d.hidden;
    cr_assert(s_eq(w->embed, w->head, n));
    cr_assert_neq(w->embed, w->head, "the head is its own copy");
    /* bf16 converted: every value is a bf16 (low 16 bits zero) */
    uint32_t bits;
    memcpy(&bits, &w->embed[3], 4);
    cr_assert_eq(bits & 0xffff, 0);
    pl_train_master_destroy(&t);
    pl_model_destroy(&pm);
    s_rmrf(src);
}

Test(train_weights, random_init_is_the_same_whatever_the_split)
{
    pl_train_local_cfg_t c = cfg_make(0, false);
    pl_train_master_t *whole = NULL, *s0 = NULL, *s1 = NULL, *other = NULL;
    cr_assert_eq(pl_train_master_random(&c, 5, 0, L, true, true, &whole), PL_OK);
    cr_assert_eq(pl_train_master_random(&c, 5, 0, 2, true, false, &s0), PL_OK);
    cr_assert_eq(pl_train_master_random(&c, 5, 2, L, false, true, &s1), PL_OK);
    cr_assert_eq(pl_train_master_random(&c, 6, 0, L, true, true, &other), PL_OK);
    pl_train_weights_t *w = pl_train_master_weights(whole), *a = pl_train_master_weights(s0),
                       *b = pl_train_master_weights(s1), *o = pl_train_master_weights(other);
    size_t sz[9], H = (size_t)g_d.hidden;
    pl_cpu_tlayer_sizes(&g_d, sz);
    cr_assert(s_eq(w->embed, a->embed, V * H));
    cr_assert(s_eq(w->head, b->head, V * H));
    cr_assert(s_eq(w->final_norm, b->final_norm, H));
    cr_assert(!s_eq(w->head, o->head, V * H), "another seed, other weights");
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++) {
            float *x = *pl_cpu_tlayer_field(&w->layers[l], i);
            cr_assert(s_eq(x, *pl_cpu_tlayer_field(&(l < 2 ? a : b)->layers[l], i), sz[i]),
                      "layer %d field %d", l, i);
            if (i == 0 || i == 5) {
                for (size_t j = 0; j < sz[i]; j++)
                    cr_assert_eq(x[j], 1.0f, "norms start at 1");
                continue;
            }
            /* uniform with std 1/sqrt(fan-in): every value within sqrt(3) std of 0 */
            size_t fan = i == 4 ? (size_t)g_d.n_heads * g_d.head_dim
                         : i == 8 ? (size_t)g_d.inter
                                  : H;
            double lim = sqrt(3.0 / (double)fan), s2 = 0;
            for (size_t j = 0; j < sz[i]; j++) {
                cr_assert_leq(fabs(x[j]), lim);
                s2 += (double)x[j] * x[j];
            }
            double sd = sqrt(s2 / (double)sz[i]);
            cr_assert(sd > 0.7 / sqrt((double)fan) && sd < 1.3 / sqrt((double)fan),
                      "layer %d field %d: std %g", l, i, sd);
        }
    pl_train_master_destroy(&whole);
    pl_train_master_destroy(&s0);
    pl_train_master_destroy(&s1);
    pl_train_master_destroy(&other);
}

Test(train_weights, refuses_what_the_trainer_lacks)
{
    pl_model_config_t mc = {.family = PL_FAMILY_LLAMA, .hidden = 16, .intermediate = 32,
                            .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 4,
                            .vocab = 12, .max_pos = 32, .rms_eps = 1e-5f, .rope_theta = 1e4f};
    double inv[2];
    pl_train_local_cfg_t c = {0};
    cr_assert_eq(pl_train_cfg_from_model(&mc, 32, 1, inv, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(pl_train_cfg_from_model(&mc, 33, 1, inv, &c), PL_ERR_RANGE);
    cr_assert(strstr(pl_error_msg(), "seq_len 33"), "%s", pl_error_msg());
    pl_model_config_t q = mc;
    q.family = PL_FAMILY_QWEN2, q.qkv_bias = true;
    cr_assert_eq(pl_train_cfg_from_model(&q, 8, 1, inv, &c), PL_ERR_UNSUPPORTED);
    cr_assert_str_eq(pl_error_msg(), "training a qwen2 model: the trainer has no q/k/v "
                                     "projection biases");
    q = mc, q.family = PL_FAMILY_MISTRAL, q.sliding_window = 4;
    cr_assert_eq(pl_train_cfg_from_model(&q, 8, 1, inv, &c), PL_ERR_UNSUPPORTED);
    cr_assert_eq(pl_train_cfg_from_model(&q, 4, 1, inv, &c), PL_OK, "a window as long as the "
                                                                     "sequence is no limit");
    pl_train_master_t *t = NULL;
    cr_assert_eq(pl_train_master_random(&c, 1, 1, 3, false, true, &t), PL_ERR_INVALID);
    cr_assert_null(t);
}

Test(train_weights, job_file_gives_the_trainer_config)
{
    static const char yaml[] = "model: m\ndata: {tokens: d}\nseq_len: 16\nglobal_batch: 6\n"
                               "steps: 40\nrecompute: true\n"
                               "optimizer: {lr: 0.02, min_lr: 0.002, warmup_steps: 4, "
                               "beta1: 0.8, beta2: 0.95, eps: 1.0e-6, weight_decay: 0.1, "
                               "clip_norm: 2}\n";
    pl_cfg_train_t job;
    cr_assert_eq(pl_cfg_train_parse(yaml, strlen(yaml), "t.yaml", NULL, &job), PL_OK, "%s",
                 pl_error_msg());
    pl_model_config_t mc = {.family = PL_FAMILY_LLAMA, .hidden = 16, .intermediate = 32,
                            .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 4,
                            .vocab = 12, .max_pos = 32, .rms_eps = 1e-5f, .rope_theta = 1e4f};
    double inv[2];
    pl_train_local_cfg_t c;
    cr_assert_eq(pl_train_cfg_from_job(&job, &mc, inv, &c), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(c.seq_len, 16);
    cr_assert_eq(c.n_mb, 6);
    cr_assert(c.recompute);
    cr_assert_eq(c.n_layers, 2);
    cr_assert_eq(c.opt.lr, 0.02f);
    cr_assert_eq(c.opt.min_lr, 0.002f);
    cr_assert_eq(c.opt.warmup_steps, 4);
    cr_assert_eq(c.opt.total_steps, 40);
    cr_assert_eq(c.opt.beta1, 0.8f);
    cr_assert_eq(c.opt.beta2, 0.95f);
    cr_assert_eq(c.opt.eps, 1e-6f);
    cr_assert_eq(c.opt.weight_decay, 0.1f);
    cr_assert_eq(c.opt.clip_norm, 2.0f);
    /* constant: the learning rate stays at lr after the warmup */
    snprintf(job.opt.lr_schedule, sizeof(job.opt.lr_schedule), "constant");
    cr_assert_eq(pl_train_cfg_from_job(&job, &mc, inv, &c), PL_OK);
    cr_assert_eq(c.opt.min_lr, 0.02f);
    cr_assert_float_eq(pl_adamw_lr(&c.opt, 39), 0.02, 1e-9);
    /* the model's limits still hold */
    job.seq_len = 33;
    cr_assert_eq(pl_train_cfg_from_job(&job, &mc, inv, &c), PL_ERR_RANGE);
}
