/* The RoPE the training suites train with, one home for grad_util.h and train_util.h (which cannot
 * include each other: each has its own rnd()). */
#ifndef PL_TESTS_ROPE_UTIL_H
#define PL_TESTS_ROPE_UTIL_H

#include "model/model.h"

/* head_dim 4, Llama 3 scaling (which changes the frequencies at this size): the settings, and
 * their inverse frequencies into inv_freq[2]. */
static inline pl_model_config_t rope_train_cfg(double *inv_freq)
{
    pl_model_config_t cfg = {.head_dim = 4,
                             .rope_theta = 10000.0f,
                             .rope_scaling = PL_ROPE_LLAMA3,
                             .rope_factor = 8.0f,
                             .rope_low_freq_factor = 1.0f,
                             .rope_high_freq_factor = 4.0f,
                             .rope_orig_max_pos = 8};
    pl_model_rope_inv_freq(&cfg, inv_freq);
    return cfg;
}

#endif
