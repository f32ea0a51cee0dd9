/* A training job's data: one stream of token ids (from a file of ids, or text through the model's
 * tokenizer) cut into each step's windows of seq_len + 1 tokens at a position that only depends
 * on the step, so a resumed run reads what the uninterrupted one would have. */
#ifndef PL_PIPELINE_TRAIN_DATA_H
#define PL_PIPELINE_TRAIN_DATA_H

#include "common/status.h"

#include <stddef.h>
#include <stdint.h>

#define PL_TRAIN_DATA_MAX_BYTES (256u << 20) /* a data file */

typedef struct pl_train_data pl_train_data_t;

/* Token ids written in decimal, separated by white space (nothing else); each below vocab.
 * Errors name origin:line and the id's index. */
pl_status_t pl_train_data_parse_ids(const char *text, size_t len, const char *origin, int vocab,
                                    pl_train_data_t **d_p);
/* The same from a file (at most PL_TRAIN_DATA_MAX_BYTES). */
pl_status_t pl_train_data_load_ids(const char *path, int vocab, pl_train_data_t **d_p);
/* A UTF-8 text file encoded with model_dir's tokenizer.json (as prompts are, BOS as the tokenizer
 * adds it); ids checked below vocab. */
pl_status_t pl_train_data_load_text(const char *path, const char *model_dir, int vocab,
                                    pl_train_data_t **d_p);
void pl_train_data_destroy(pl_train_data_t **d_p);
size_t pl_train_data_len(const pl_train_data_t *d);

/* Step `step`'s n_mb windows into tokens [n_mb][seq_len + 1]: window g = step * n_mb + m starts
 * at (g * seq_len) mod (len - seq_len), so consecutive windows tile the stream (each one's last
 * token the next one's first) and wrap around. PL_ERR_RANGE when the stream is shorter than one
 * window. */
pl_status_t pl_train_data_step(const pl_train_data_t *d, int seq_len, int n_mb, int64_t step,
                               int32_t *tokens);

#endif
