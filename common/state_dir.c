/* The per-user state directory: where it is ($XDG_STATE_HOME or ~/.local/state) and that only
 * its owner can reach it. */
#include "common/state_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* mkdir -p with `mode` for the directories it creates. */
static pl_status_t s_mkdirs(char *path, mode_t mode)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(path, mode) != 0 && errno != EEXIST) {
            pl_status_t st = pl_error(PL_ERR_IO, "state directory %s: %s", path, strerror(errno));
            *p = saved;
            return st;
        }
        *p = saved;
        if (!saved)
            return PL_OK;
    }
}

pl_status_t pl_state_dir(char *out, size_t out_len)
{
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char path[4096];
    int n;
    struct stat sb;
    pl_status_t st;

    if (xdg && xdg[0] == '/') /* the XDG spec: a relative value is to be ignored */
        n = snprintf(path, sizeof(path), "%s/pipeld", xdg);
    else if (home && home[0] == '/')
        n = snprintf(path, sizeof(path), "%s/.local/state/pipeld", home);
    else
        return pl_error(PL_ERR_NOT_FOUND,
                        "state directory: neither XDG_STATE_HOME nor HOME is an absolute path");
    if (n < 0 || (size_t)n >= sizeof(path) || (size_t)n >= out_len)
        return pl_error(PL_ERR_RANGE, "state directory: the path is too long");
    if ((st = s_mkdirs(path, 0700)))
        return st;
    if (lstat(path, &sb) != 0)
        return pl_error(PL_ERR_IO, "state directory %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
        return pl_error(PL_ERR_INVALID, "state directory %s: not a directory owned by this user",
                        path);
    if (sb.st_mode & 077)
        return pl_error(PL_ERR_INVALID,
                        "state directory %s: mode %03o lets other users in (chmod 700 it)", path,
                        (unsigned)(sb.st_mode & 0777));
    memcpy(out, path, (size_t)n + 1);
    return PL_OK;
}

pl_status_t pl_state_path(const char *name, char *out, size_t out_len)
{
    char dir[4096];
    pl_status_t st = pl_state_dir(dir, sizeof(dir));
    if (st)
        return st;
    int n = snprintf(out, out_len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= out_len)
        return pl_error(PL_ERR_RANGE, "state file %s/%s: the path is too long", dir, name);
    return PL_OK;
}
