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

bool pl_log_limit_pass(pl_log_limit_t *l, long *suppressed_p)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double now = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    bool pass;
    pthread_mutex_lock(&s_lock);
    if (now - l->window >= 1.0) {
        l->window = now;
        l->count = 0;
    }
    pass = l->count < PL_LOG_BURST;
    *suppressed_p = 0;
    if (pass) {
        l->count++;
        *suppressed_p = l->suppressed;
        l->suppressed = 0;
    } else {
        l->suppressed++;
    }
    pthread_mutex_unlock(&s_lock);
    return pass;
}

void pl_log_write(pl_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    static const char *tags[] = {"error", "warn", "info", "debug"};
    struct timespec ts;
    struct tm tm;
    char when[32];
    FILE *out = s_stream ? s_stream : stderr;
    va_list ap;

    char msg[4096];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&s_lock);
    fprintf(out, "%s.%03ld %s %s: ", when, ts.tv_nsec / 1000000, s_ident, tags[level]);
    /* one line, whatever the message holds: a name with a newline cannot forge a log line */
    for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
        if (*p == '\\')
            fputs("\\\\", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    if (n >= (int)sizeof(msg))
        fputs("...", out);
    if (level == PL_LOG_DEBUG) {
        const char *base = strrchr(file, '/');
        fprintf(out, " (%s:%d)", base ? base + 1 : file, line);
    }
    fputc('\n', out);
    fflush(out);
    pthread_mutex_unlock(&s_lock);
}
