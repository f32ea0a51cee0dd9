/* The models.allow rule (path_allow.h), one home for the coordinator's checks of a job's model,
 * resume_from and checkpoint_dir and for a daemon's check before it writes a checkpoint. */
#include "common/path_allow.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* path (already resolved) lies in dir (resolved): equal, or dir followed by '/'. */
static bool s_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    if (n == 1 && dir[0] == '/')
        return true;
    return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

static bool s_allowed(const char (*dirs)[PATH_MAX], int n_dirs, const char *real)
{
    for (int i = 0; i < n_dirs; i++) {
        char dir[PATH_MAX];
        if (realpath(dirs[i], dir) && s_under(real, dir))
            return true;
    }
    return false;
}

/* realpath of path, or of its longest existing prefix with the rest appended (plain names
 * only); *exists says which. errno-style failures are PL_ERR_PERMISSION naming key. */
static pl_status_t s_resolve(const char *key, const char *path, bool must_exist, char *real,
                             bool *exists)
{
    char prefix[PATH_MAX], tail[PATH_MAX] = "";
    if (realpath(path, real)) {
        *exists = true;
        return PL_OK;
    }
    if (must_exist || errno != ENOENT || strlen(path) >= sizeof(prefix))
        return pl_error(PL_ERR_PERMISSION, "%s '%.200s': %s", key, path, strerror(errno));
    snprintf(prefix, sizeof(prefix), "%s", path);
    for (;;) {
        char *slash = strrchr(prefix, '/');
        const char *name = slash ? slash + 1 : prefix;
        if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
            return pl_error(PL_ERR_PERMISSION, "%s '%.200s': a part that is not there yet must "
                            "be a plain name (not empty, '.' or '..')", key, path);
        char t[PATH_MAX];
        if (snprintf(t, sizeof(t), "%s%s%s", name, tail[0] ? "/" : "", tail) >= (int)sizeof(t))
            return pl_error(PL_ERR_PERMISSION, "%s '%.200s': path too long", key, path);
        memcpy(tail, t, sizeof(tail));
        if (!slash)
            snprintf(prefix, sizeof(prefix), ".");
        else if (slash == prefix)
            prefix[1] = '\0'; /* "/" */
        else
            *slash = '\0';
        if (realpath(prefix, real))
            break;
        if (errno != ENOENT)
            return pl_error(PL_ERR_PERMISSION, "%s '%.200s': %s", key, path, strerror(errno));
    }
    size_t n = strlen(real);
    if (n + 1 + strlen(tail) >= PATH_MAX)
        return pl_error(PL_ERR_PERMISSION, "%s '%.200s': path too long", key, path);
    snprintf(real + n, PATH_MAX - n, "%s%s", real[n - 1] == '/' ? "" : "/", tail);
    *exists = false;
    return PL_OK;
}

pl_status_t pl_path_allow_check(const char *key, const char *path, const char (*dirs)[PATH_MAX],
                                int n_dirs, bool must_exist)
{
    char real[PATH_MAX], entry[PATH_MAX + 256], target[PATH_MAX];
    bool exists = false;
    pl_status_t st;
    if (n_dirs == 0)
        return PL_OK;
    /* the message never says why realpath failed beyond errno: no file contents leave */
    if ((st = s_resolve(key, path, must_exist, real, &exists)))
        return st;
    if (!s_allowed(dirs, n_dirs, real))
        return pl_error(PL_ERR_PERMISSION,
                        "%s '%.200s' is outside the directories the cluster file allows "
                        "(models.allow)",
                        key, path);
    if (!exists)
        return PL_OK;
    DIR *d = opendir(real);
    if (!d) {
        if (errno == ENOTDIR && !must_exist)
            return PL_OK; /* a file: its own resolution is the check */
        return pl_error(PL_ERR_PERMISSION, "%s '%.200s': %s", key, path, strerror(errno));
    }
    /* every entry in it too: a link out of the allowed directories is refused */
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(entry, sizeof(entry), "%s/%s", real, e->d_name);
        struct stat sb;
        bool resolved = realpath(entry, target) != NULL;
        if (!resolved && lstat(entry, &sb) != 0 && errno == ENOENT)
            continue; /* gone since readdir (another stage's temporary file renamed) */
        if (!resolved || !s_allowed(dirs, n_dirs, target)) {
            st = pl_error(PL_ERR_PERMISSION,
                          "%s '%.200s': '%.200s' leads outside the directories the cluster file "
                          "allows (models.allow)",
                          key, path, e->d_name);
            closedir(d); /* e lives in d */
            return st;
        }
    }
    closedir(d);
    return PL_OK;
}
