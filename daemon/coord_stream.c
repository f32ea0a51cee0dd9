/* The streamed text of a running one-prompt text job: pieces from its last stage's heartbeats
 * appended in order, for STATUS (`pipectl generate` prints them as they come). */
#include "common/log.h"
#include "daemon/coord_int.h"

#include <stdlib.h>
#include <string.h>

void pl_coord_stream_piece(pl_coord_job_t *j, uint32_t epoch, int64_t at, const char *text,
                           size_t len)
{
    /* Any assignment's: a resumed job's new last stage decodes its tokens again from the
     * first (gen_flow.c replays them), so its offsets and bytes are this stream's. */
    /* a piece that starts past the end (one before it was lost) or ends before it (a
     * duplicate) adds nothing; an overlap adds what is new, which starts on a character
     * boundary since both are prefixes of the same text */
    if (at < 0 || (uint64_t)at > j->stream_len || (uint64_t)at + len <= j->stream_len)
        return;
    size_t skip = j->stream_len - (size_t)at, add = len - skip;
    if (j->stream_len + add > PL_COORD_MAX_STREAM)
        return;
    if (j->stream_len + add > j->stream_cap) {
        size_t cap = j->stream_cap ? j->stream_cap : 1024;
        while (cap < j->stream_len + add)
            cap *= 2;
        char *b = realloc(j->stream, cap + 1);
        if (!b) {
            pl_log_warn("job %u: out of memory for its streamed text", j->id);
            return;
        }
        j->stream = b;
        j->stream_cap = cap;
    }
    memcpy(j->stream + j->stream_len, text + skip, add);
    j->stream_len += add;
    j->stream[j->stream_len] = '\0';
    j->stream_epoch = epoch;
}

void pl_coord_stream_clear(pl_coord_job_t *j)
{
    free(j->stream);
    j->stream = NULL;
    j->stream_len = j->stream_cap = 0;
}
