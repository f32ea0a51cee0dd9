/* libFuzzer harness for config.json parsing: an accepted config must satisfy every invariant the
 * backends rely on. Build and run from the repository root:
 * clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. tests/fuzz/fuzz_model_config.c model/config.c common/json.c common/status.c common/util.c common/log.c -ljansson -lpthread -lm -o /tmp/fuzz_model_config && /tmp/fuzz_model_config -max_total_time=60 CORPUS_DIR */
#include "model/model.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pl_model_config_t c;

    if (pl_model_config_parse((const char *)data, size, &c) != PL_OK)
        return 0;
    if (c.hidden < 1 || c.hidden > 65536 || c.n_layers < 1 || c.n_layers > 1024 ||
        c.vocab < 1 || c.vocab > (1 << 22) || c.intermediate < 1 || c.n_heads < 1 ||
        c.n_kv_heads < 1 || c.n_heads % c.n_kv_heads != 0 || c.head_dim < 2 ||
        c.head_dim % 2 != 0 || c.max_pos < 1 || !(c.rms_eps > 0) || !(c.rope_theta > 0) ||
        (c.dtype != PL_DT_F32 && c.dtype != PL_DT_F16 && c.dtype != PL_DT_BF16))
        abort();
    if (c.n_eos < 0 || c.n_eos > PL_MODEL_MAX_EOS || c.bos_id < -1 || c.bos_id >= c.vocab)
        abort();
    for (int i = 0; i < c.n_eos; i++)
        if (c.eos_ids[i] < 0 || c.eos_ids[i] >= c.vocab)
            abort();
    if (c.rope_scaling == PL_ROPE_LLAMA3 &&
        (!(c.rope_factor >= 1) || !(c.rope_high_freq_factor > c.rope_low_freq_factor) ||
         c.rope_orig_max_pos < 1))
        abort();
    /* the family and its structure agree; a window only on Mistral */
    if ((unsigned)c.family >= PL_FAMILY_COUNT || c.qkv_bias != (c.family == PL_FAMILY_QWEN2) ||
        c.qk_norm != (c.family == PL_FAMILY_QWEN3) || c.sliding_window < 0 ||
        (c.sliding_window > 0 && c.family != PL_FAMILY_MISTRAL))
        abort();
    return 0;
}
