/* The client intake's decoders: a few threads that parse, authorise and validate the requests
 * too large (or too slow: a SUBMIT's model is read) for the intake's own thread, so that the
 * small requests of other clients never wait behind them. */
#ifndef PL_DAEMON_COORD_DECODER_H
#define PL_DAEMON_COORD_DECODER_H

#include "common/status.h"

#include <stdbool.h>

typedef struct pl_coord_decoder pl_coord_decoder_t;

/* Called on a decoder thread once per item put, oldest first among those waiting (with several
 * threads, items may finish in any order: the caller restores its order); stopping: the pool
 * stops before the item was begun (do nothing but let it go). */
typedef void (*pl_coord_decode_fn)(void *arg, void *tag, bool stopping);

pl_status_t pl_coord_decoder_start(int threads, pl_coord_decode_fn fn, void *arg,
                                   pl_coord_decoder_t **d_p);
/* Queue tag (the caller bounds what it puts). Any thread. */
pl_status_t pl_coord_decoder_put(pl_coord_decoder_t *d, void *tag);
/* The items begun are finished, the rest called with stopping; *d_p NULL; safe on NULL. */
void pl_coord_decoder_stop(pl_coord_decoder_t **d_p);

#endif
