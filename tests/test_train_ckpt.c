/* Tests of training checkpoints: a model trained on 3 stages, each stage writing its shard, opens
 * as a Hugging Face model (config.json copied; every tensor's HF name and shape checked by the
 * model loader against the config) holding exactly the trained weights. */
#include "pipeline/train_ckpt.h"
#include "train_util.h"

#include <stdio.h>
#include <unistd.h>

Test(train_ckpt, three_stage_checkpoint_opens_as_the_trained_model, .timeout = 120)
{
    char src[] = "/tmp/pl_ckpt_src_XXXXXX", dir[] = "/tmp/pl_ckpt_XXXXXX", cmd[1024];
    model_dir_make(src); /* its config.json has the test model's shape */
    cr_assert_not_null(mkdtemp(dir));
    const int counts[3] = {1, 1, 1};
    double losses[K];
    model_t m;
    run_pipelined(PL_TRAIN_ZBH1, counts, 3, 0, false, losses, &m, false);
    pl_train_local_cfg_t c = cfg_make(0, false);
    for (int s = 0; s < 3; s++)
        cr_assert_eq(pl_train_ckpt_stage_write(dir, &c, &m.w, s, 3, s, s + 1), PL_OK, "%s",
                     pl_error_msg());
    cr_assert_eq(pl_train_ckpt_index_write(dir, &c, counts, 3, src), PL_OK, "%s", pl_error_msg());

    pl_model_t *pm = NULL;
    cr_assert_eq(pl_model_open(dir, &pm), PL_OK, "%s", pl_error_msg());
    float *p[64];
    size_t n[64];
    bool decay[64];
    int nt = model_tensors(&m, p, n, decay);
    char names[64][96];
    int k = 0;
    snprintf(names[k++], 96, "model.embed_tokens.weight");
    static const char *const f[9] = {"input_layernorm",  "self_attn.q_proj",
                                     "self_attn.k_proj", "self_attn.v_proj",
                                     "self_attn.o_proj", "post_attention_layernorm",
                                     "mlp.gate_proj",    "mlp.up_proj",
                                     "mlp.down_proj"};
    for (int l = 0; l < L; l++)
        for (int i = 0; i < 9; i++)
            snprintf(names[k++], 96, "model.layers.%d.%s.weight", l, f[i]);
    snprintf(names[k++], 96, "model.norm.weight");
    snprintf(names[k++], 96, "lm_head.weight");
    cr_assert_eq(k, nt);
    for (int i = 0; i < nt; i++) {
        pl_tensor_view_t v;
        cr_assert_eq(pl_model_tensor(pm, names[i], &v), PL_OK, "%s: %s", names[i],
                     pl_error_msg());
        float *vals;
        bool owned;
        cr_assert_eq(pl_model_tensor_f32(pm, names[i], 0, NULL, &vals, &owned), PL_OK, "%s",
                     pl_error_msg());
        cr_assert_eq(memcmp(vals, p[i], n[i] * sizeof(float)), 0, "%s differs", names[i]);
        if (owned)
            free(vals);
    }
    pl_model_destroy(&pm);
    /* a split that does not cover the model is refused */
    const int bad[2] = {1, 1};
    cr_assert_eq(pl_train_ckpt_index_write(dir, &c, bad, 2, NULL), PL_ERR_INVALID);
    model_free(&m);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", src, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
}
