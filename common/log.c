/* Log sink: one line per call, with time, identity and level. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

pl_log_level_t pl_log_level_g = PL_LOG_INFO;

static char s_ident[64] = "pipeld";
static FILE *s_stream;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;

void pl_log_set_level(pl_log_level_t level)
{
    pl_log_level_g = level;
}

int pl_log_level_parse(const char *name)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (name && strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void pl_log_set_ident(const char *ident)
{
    snprintf(s_ident, sizeof(s_ident), "%s", ident);
}

void pl_log_set_stream(FILE *stream)
{
    s_stream = stream;
}

void pl_log_write(pl_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    static const char *tags[] = {"error", "warn", "info", "debug"};
    struct timespec ts;
    struct tm tm;
    char when[32];
    FILE *out = s_stream ? s_stream : stderr;
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    pthread_mutex_lock(&s_lock);
    fprintf(out, "%s.%03ld %s %s: ", when, ts.tv_nsec / 1000000, s_ident, tags[level]);
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    if (level == PL_LOG_DEBUG) {
        const char *base = strrchr(file, '/');
        fprintf(out, " (%s:%d)", base ? base + 1 : file, line);
    }
    fputc('\n', out);
    fflush(out);
    pthread_mutex_unlock(&s_lock);
}
