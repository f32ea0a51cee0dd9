/* libFuzzer harness for the messages a resume rides on: PROGRESS (a node's token reports) and
 * ASSIGN with its per-sequence resume list. Every body must be refused or accepted without
 * crashing; an accepted one must encode again and decode to the same JSON. Not part of the
 * CMake build:
 *   clang -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -I. \
 *       tests/fuzz/fuzz_progress.c transport/ctl.c transport/msg*.c transport/act_dtype.c \
 *       common/status.c common/json.c common/job_spec.c common/util.c common/log.c \
 *       -ljansson -lzmq -lm -o /tmp/fuzz_progress
 *   /tmp/fuzz_progress -max_total_time=60 -max_len=4096 /tmp/fuzz_progress_corpus
 * Input: one byte choosing the type (even: PROGRESS, odd: ASSIGN), then the JSON body. */
#include "transport/msg.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    pl_msg_type_t type = data[0] % 2 ? PL_MSG_ASSIGN : PL_MSG_PROGRESS;
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!body)
        return 0;
    pl_msg_t m, again;
    if (pl_msg_decode(type, body, &m) == PL_OK) {
        json_t *enc = NULL, *enc2 = NULL;
        if (pl_msg_encode(&m, &enc) != PL_OK)
            abort(); /* what was accepted must encode */
        if (pl_msg_decode(type, enc, &again) != PL_OK)
            abort();
        if (pl_msg_encode(&again, &enc2) != PL_OK || !json_equal(enc, enc2))
            abort();
        if (type == PL_MSG_PROGRESS) {
            int64_t total = 0;
            for (int i = 0; i < m.progress.n_seqs; i++) {
                const pl_msg_seq_tokens_t *e = &m.progress.seqs[i];
                if (e->seq < 0 || e->seq >= PL_JOB_MAX_SEQS || e->at < 0 || e->n_tokens < 1 ||
                    e->at + e->n_tokens > PL_JOB_MAX_NEW_TOKENS)
                    abort(); /* the decoder's bounds are what the coordinator relies on */
                total += e->n_tokens;
            }
            if (total > PL_MSG_MAX_PROGRESS_TOKENS)
                abort();
        } else if (m.assign.n_resume && m.assign.n_resume != m.assign.spec.n_prompts) {
            abort();
        }
        json_decref(enc);
        json_decref(enc2);
        pl_msg_clear(&again);
        pl_msg_clear(&m);
    }
    json_decref(body);
    return 0;
}
