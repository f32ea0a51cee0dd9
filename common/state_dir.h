/* The per-user state directory of pipeld (coordinator database, generated keys): one lookup for
 * every program, so that pipecoord, pipeld and pipectl agree on where their state lives. */
#ifndef PL_COMMON_STATE_DIR_H
#define PL_COMMON_STATE_DIR_H

#include "common/status.h"

#include <stddef.h>

/* $XDG_STATE_HOME/pipeld, else $HOME/.local/state/pipeld, created (parents too) with mode 0700
 * when missing. Refused when it exists but is not a directory of ours, or other users may
 * read or enter it. The path goes to out (out_len bytes, NUL included). */
pl_status_t pl_state_dir(char *out, size_t out_len);

/* pl_state_dir()/name into out. */
pl_status_t pl_state_path(const char *name, char *out, size_t out_len);

#endif
