/* libFuzzer harness for the job description a coordinator receives (pl_gen_job_from_json) and
 * the prompts JSONL pipectl reads (pl_gen_prompts_parse). Not built by CMake:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_gen_job.c pipeline/gen_job.c transport/act_dtype.c common/status.c \
 *     common/json.c common/util.c \
 *     $(pkg-config --cflags --libs jansson) -lm -o /tmp/fuzz_gen_job
 *   /tmp/fuzz_gen_job -max_total_time=60 -max_len=4096 */
#include "pipeline/gen.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    pl_model_config_t cfg = {.hidden = 8, .vocab = 100, .max_pos = 64, .n_eos = 1, .eos_ids = {2}};
    json_t *prompts = NULL;
    if (pl_gen_prompts_parse((const char *)data, len, "fuzz", &prompts) == PL_OK) {
        if (json_array_size(prompts) == 0 || json_array_size(prompts) > PL_GEN_MAX_SEQS)
            __builtin_trap();
        json_decref(prompts);
    }
    json_t *obj = json_loadb((const char *)data, len, 0, NULL);
    if (obj) {
        pl_gen_job_t job;
        if (pl_gen_job_from_json(obj, &cfg, &job) == PL_OK) {
            /* what was accepted must be usable: every token in the vocabulary, positions fit */
            for (int s = 0; s < job.n_seqs; s++) {
                if (job.prompt_len[s] < 1 || job.prompt_len[s] + job.max_new_tokens > cfg.max_pos)
                    __builtin_trap();
                for (int t = 0; t < job.prompt_len[s]; t++)
                    if (job.prompts[s][t] < 0 || job.prompts[s][t] >= cfg.vocab)
                        __builtin_trap();
            }
            if (job.microbatches < 1 || job.microbatches > job.n_seqs ||
                pl_gen_job_max_tokens(&job) < 1)
                __builtin_trap();
            pl_gen_job_clear(&job);
        }
        json_decref(obj);
    }
    return 0;
}
