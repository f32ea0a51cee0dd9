/* RoPE frequencies of a model: rope_theta, with the llama3 rope_scaling applied exactly as
 * Hugging Face's _compute_llama3_parameters. Shared by every backend so they rotate alike. */
#include "model/model.h"

#include <math.h>

void pl_model_rope_inv_freq(const pl_model_config_t *cfg, double *inv_freq)
{
    int half = cfg->head_dim / 2;
    for (int i = 0; i < half; i++) {
        double f = pow((double)cfg->rope_theta, -2.0 * i / cfg->head_dim);
        if (cfg->rope_scaling == PL_ROPE_LLAMA3) {
            double factor = cfg->rope_factor, low = cfg->rope_low_freq_factor;
            double high = cfg->rope_high_freq_factor, orig = cfg->rope_orig_max_pos;
            double low_wavelen = orig / low, high_wavelen = orig / high;
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > low_wavelen) {
                f = f / factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (orig / wavelen - low) / (high - low);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}
