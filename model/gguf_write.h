/* A GGUF v3 writer: metadata and tensor infos built in memory, then the header and the tensors'
 * bytes streamed to a file in the order the tensors were added, each padded to the alignment. */
#ifndef PL_MODEL_GGUF_WRITE_H
#define PL_MODEL_GGUF_WRITE_H

#include "common/status.h"
#include "model/wtype.h"

#include <stdio.h>

typedef struct pl_gguf_writer pl_gguf_writer_t;

pl_status_t pl_gguf_writer_new(pl_gguf_writer_t **w_p);
/* Free; sets *w_p to NULL; safe on NULL. */
void pl_gguf_writer_destroy(pl_gguf_writer_t **w_p);

pl_status_t pl_gguf_writer_str(pl_gguf_writer_t *w, const char *key, const char *v);
pl_status_t pl_gguf_writer_u32(pl_gguf_writer_t *w, const char *key, uint32_t v);
pl_status_t pl_gguf_writer_f32(pl_gguf_writer_t *w, const char *key, float v);
pl_status_t pl_gguf_writer_arr_str(pl_gguf_writer_t *w, const char *key, const char *const *v,
                                   size_t n);
pl_status_t pl_gguf_writer_arr_f32(pl_gguf_writer_t *w, const char *key, const float *v,
                                   size_t n);
pl_status_t pl_gguf_writer_arr_i32(pl_gguf_writer_t *w, const char *key, const int32_t *v,
                                   size_t n);
/* Add a tensor: ne[0] is the row length (ggml order). Its bytes come later, in order. */
pl_status_t pl_gguf_writer_tensor(pl_gguf_writer_t *w, const char *name, pl_wtype_t dt, int ndim,
                                  const int64_t *ne);
/* Write the header (after every key and tensor was added). */
pl_status_t pl_gguf_writer_header(pl_gguf_writer_t *w, FILE *f);
/* Append n bytes of the current tensor; once a tensor is complete, padding follows. */
pl_status_t pl_gguf_writer_data(pl_gguf_writer_t *w, FILE *f, const void *bytes, size_t n);
/* True once every tensor's bytes were written. */
bool pl_gguf_writer_done(const pl_gguf_writer_t *w);

#endif
