/* A slow disk for the tests, loaded with LD_PRELOAD (target pl_slow_fsync): fsync and fdatasync
 * of a file whose path contains $PL_SLOW_FSYNC_PATH sleep $PL_SLOW_FSYNC_MS milliseconds first,
 * then do the real call. Nothing else changes. Unset (or an empty pattern): no delay. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*s_sync_fn)(int);

/* Sleep first when fd's path matches the pattern. errno is the caller's again afterwards. */
static void s_maybe_sleep(int fd)
{
    const char *pat = getenv("PL_SLOW_FSYNC_PATH"), *ms_s = getenv("PL_SLOW_FSYNC_MS");
    if (!pat || !*pat || !ms_s)
        return;
    long ms = strtol(ms_s, NULL, 10);
    if (ms <= 0)
        return;
    char link[64], path[4096];
    int saved = errno;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n > 0) {
        path[n] = '\0';
        if (strstr(path, pat)) {
            struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
            while (nanosleep(&t, &t) < 0 && errno == EINTR)
                ;
        }
    }
    errno = saved;
}

int fsync(int fd)
{
    static s_sync_fn real;
    if (!real)
        real = (s_sync_fn)dlsym(RTLD_NEXT, "fsync");
    s_maybe_sleep(fd);
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
    s_maybe_sleep(fd);
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fd);
}
