/* Helpers for tests that run programs: the binaries' directory, free loopback ports, scratch
 * directories, background processes with logs (they die with the test process:
 * PR_SET_PDEATHSIG), a slow or failing disk under them, shell commands with their output, small
 * files, the clock, a process's resident set. */
#ifndef PL_TESTS_PROC_UTIL_H
#define PL_TESTS_PROC_UTIL_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

static inline const char *tc_bin(void)
{
    const char *b = getenv("PL_BIN_DIR");
    return b && *b ? b : PL_BIN_DIR;
}

/* A free loopback port whose next port is free too: a coordinator started on tcp://...:PORT
 * binds its node endpoint on PORT + 1 (pl_cfg_node_endpoint). */
static inline int tc_free_port(void)
{
    for (int tries = 0; tries < 64; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0), next = socket(AF_INET, SOCK_STREAM, 0), port = 0;
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(a);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &len) == 0)
            port = ntohs(a.sin_port);
        a.sin_port = htons((uint16_t)(port + 1));
        bool pair = port > 0 && port < 65535 && next >= 0 &&
                    bind(next, (struct sockaddr *)&a, sizeof(a)) == 0;
        if (fd >= 0)
            close(fd);
        if (next >= 0)
            close(next);
        if (pair)
            return port;
    }
    return 0;
}

static inline void tc_mkdtemp(char *out, size_t len)
{
    snprintf(out, len, "/tmp/pl-test-XXXXXX");
    cr_assert_not_null(mkdtemp(out), "mkdtemp %s: %s", out, strerror(errno));
}

/* Run argv (NULL-terminated) in the background with stdout+stderr appended to `log`. */
static inline pid_t tc_spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

/* The slow-disk shim (tests/slow_fsync.c, libpl_slow_fsync.so beside the binaries, LD_PRELOAD)
 * under the programs started from here until tc_slow_disk_off: every fsync of a file whose path
 * holds `pattern` sleeps ms first, and fails (EIO) while the file `fail_flag` exists (NULL:
 * never). In a sanitized build the preloaded shim comes before the sanitizer's runtime, which is
 * told so; the environment is the test's own again after tc_slow_disk_off. */
typedef struct {
    char *asan; /* ASAN_OPTIONS before (NULL: unset) */
} tc_slow_disk_t;

static inline void tc_slow_disk_on(tc_slow_disk_t *s, const char *pattern, int ms,
                                   const char *fail_flag)
{
    char shim[600], asan[1024], ms_s[32];
    snprintf(shim, sizeof(shim), "%s/libpl_slow_fsync.so", tc_bin());
    cr_assert_eq(access(shim, R_OK), 0, "no %s (the target pl_slow_fsync)", shim);
    const char *old = getenv("ASAN_OPTIONS");
    s->asan = old ? strdup(old) : NULL;
    snprintf(asan, sizeof(asan), "%s%sverify_asan_link_order=0", old ? old : "",
             old && *old ? ":" : "");
    snprintf(ms_s, sizeof(ms_s), "%d", ms);
    setenv("ASAN_OPTIONS", asan, 1);
    setenv("LD_PRELOAD", shim, 1);
    setenv("PL_SLOW_FSYNC_PATH", pattern, 1);
    setenv("PL_SLOW_FSYNC_MS", ms_s, 1);
    if (fail_flag)
        setenv("PL_SLOW_FSYNC_FAIL", fail_flag, 1);
    else
        unsetenv("PL_SLOW_FSYNC_FAIL");
}

static inline void tc_slow_disk_off(tc_slow_disk_t *s)
{
    unsetenv("LD_PRELOAD");
    unsetenv("PL_SLOW_FSYNC_PATH");
    unsetenv("PL_SLOW_FSYNC_MS");
    unsetenv("PL_SLOW_FSYNC_FAIL");
    if (s->asan)
        setenv("ASAN_OPTIONS", s->asan, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(s->asan);
    s->asan = NULL;
}

/* Run a shell command; stdout into a malloc'd *out (may be NULL); returns the exit status. */
static inline int tc_sh(char **out, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    cr_assert(p && buf, "popen %s: %s", cmd, strerror(errno));
    for (size_t n; (n = fread(buf + len, 1, cap - len - 1, p)) > 0;) {
        len += n;
        if (cap - len < 1024) {
            buf = realloc(buf, cap *= 2);
            cr_assert_not_null(buf, "output of %s: %zu bytes", cmd, cap);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static inline void tc_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static inline double tc_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* the clock pl_now() reads in every process */
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Resident set of a process in KiB (/proc/PID/status VmRSS); -1 when it is gone. */
static inline long tc_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

#endif
