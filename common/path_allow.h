/* The one rule for paths a job may name (models.allow): a path is allowed when, resolved, it
 * lies in one of the allowed directories; symlinks and ".." cannot lead out of them. */
#ifndef PL_COMMON_PATH_ALLOW_H
#define PL_COMMON_PATH_ALLOW_H

#include "common/status.h"

#include <limits.h>
#include <stdbool.h>

/* Whether `path` (the job's `key`: "model", "checkpoint_dir") lies in one of dirs[0..n_dirs)
 * (n_dirs 0: any path). The path is resolved by realpath: whole when it exists, else its longest
 * existing prefix, the rest of it then plain names (no "." or ".."), as a directory made there
 * would be. When it exists as a directory, each of its entries must resolve inside too (a link
 * out of the allowed directories is refused). must_exist: a path that is not there is refused.
 * PL_ERR_PERMISSION naming key and path (up to 200 bytes) and models.allow; the message never
 * quotes file contents. */
pl_status_t pl_path_allow_check(const char *key, const char *path, const char (*dirs)[PATH_MAX],
                                int n_dirs, bool must_exist);

#endif
