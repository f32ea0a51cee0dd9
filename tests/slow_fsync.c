/* A slow (or failing) disk for the tests, loaded with LD_PRELOAD (target pl_slow_fsync; set up by
 * tc_slow_disk_on, tests/proc_util.h): fsync and fdatasync of a file whose path contains
 * $PL_SLOW_FSYNC_PATH sleep $PL_SLOW_FSYNC_MS milliseconds first, then do the real call; while
 * the file $PL_SLOW_FSYNC_FAIL exists, they fail with EIO instead, as a disk that cannot write
 * does. Nothing else changes. Unset (or an empty pattern): no delay, no failure. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*s_sync_fn)(int);

/* Sleep first when fd's path matches the pattern; true when the sync is to fail. errno is the
 * caller's again afterwards. */
static bool s_maybe_sleep(int fd)
{
    const char *pat = getenv("PL_SLOW_FSYNC_PATH"), *ms_s = getenv("PL_SLOW_FSYNC_MS");
    const char *fail = getenv("PL_SLOW_FSYNC_FAIL");
    if (!pat || !*pat)
        return false;
    long ms = ms_s ? strtol(ms_s, NULL, 10) : 0;
    char link[64], path[4096];
    int saved = errno;
    bool failed = false;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n > 0) {
        path[n] = '\0';
        if (strstr(path, pat)) {
            struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
            while (ms > 0 && nanosleep(&t, &t) < 0 && errno == EINTR)
                ;
            failed = fail && *fail && access(fail, F_OK) == 0;
        }
    }
    errno = saved;
    return failed;
}

int fsync(int fd)
{
    static s_sync_fn real;
    if (!real)
        real = (s_sync_fn)dlsym(RTLD_NEXT, "fsync");
    if (s_maybe_sleep(fd)) {
        errno = EIO;
        return -1;
    }
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd);
}

int fdatasync(int fd)
{
    static s_sync_fn real;
    if (!real)
        real = (s_sync_fn)dlsym(RTLD_NEXT, "fdatasync");
    if (s_maybe_sleep(fd)) {
        errno = EIO;
        return -1;
    }
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd);
}
