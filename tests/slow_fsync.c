/* A slow disk for tests and benches, by LD_PRELOAD: fsync and fdatasync of a file whose path
 * (readlink of /proc/self/fd/N) contains $PL_SLOW_FSYNC_PATH sleep $PL_SLOW_FSYNC_MS milliseconds
 * first, then do the real call. Nothing else. (SQLite in WAL mode syncs the -wal file: match a
 * substring such as "coord.db".) */

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void s_maybe_sleep(int fd)
{
    const char *want = getenv("PL_SLOW_FSYNC_PATH"), *ms = getenv("PL_SLOW_FSYNC_MS");
    if (!want || !want[0] || !ms)
        return;
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return;
    path[n] = '\0';
    if (!strstr(path, want))
        return;
    long v = strtol(ms, NULL, 10);
    if (v <= 0)
        return;
    struct timespec t = {.tv_sec = v / 1000, .tv_nsec = (v % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0)
        ;
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    s_maybe_sleep(fd);
    return real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    s_maybe_sleep(fd);
    return real(fd);
}
