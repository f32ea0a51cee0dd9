/* Log sink: one line per call with time, process, node, job and level, as text or JSON, to a
 * stream or journald. The message is escaped whole, so an outside string never breaks a line. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef PL_HAVE_LIBSYSTEMD
#define SD_JOURNAL_SUPPRESS_LOCATION /* CODE_FILE/LINE are the caller's, not this file's */
#include <systemd/sd-journal.h>
#include <unistd.h>
#endif

#define S_MSG_MAX 65536 /* a longer message is cut, with "..." at its end */

pl_log_level_t pl_log_level_g = PL_LOG_INFO;

static char s_ident[64] = "pipeld";
static char s_node[64];
static pl_log_format_t s_format = PL_LOG_TEXT;
static pl_log_target_t s_target = PL_LOG_STDERR;
static FILE *s_stream;
static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local uint64_t s_job;

const char *const pl_log_level_names[] = {"error", "warn", "info", "debug", NULL};
const char *const pl_log_format_names[] = {"text", "json", NULL};
const char *const pl_log_target_names[] = {"stderr", "journald", NULL};

static int s_choice(const char *const *names, const char *name)
{
    for (int i = 0; name && names[i]; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void pl_log_set_level(pl_log_level_t level)
{
    pl_log_level_g = level;
}

int pl_log_level_parse(const char *name)
{
    return s_choice(pl_log_level_names, name);
}

int pl_log_format_parse(const char *name)
{
    return s_choice(pl_log_format_names, name);
}

int pl_log_target_parse(const char *name)
{
    return s_choice(pl_log_target_names, name);
}

void pl_log_set_format(pl_log_format_t format)
{
    s_format = format;
}

int pl_log_journald_built(void)
{
#ifdef PL_HAVE_LIBSYSTEMD
    return 1;
#else
    return 0;
#endif
}

pl_status_t pl_log_set_target(pl_log_target_t target)
{
    if (target == PL_LOG_JOURNALD && !pl_log_journald_built())
        return pl_error(PL_ERR_UNSUPPORTED,
                        "log_target journald: this build has no libsystemd (install "
                        "libsystemd-dev and rebuild)");
    s_target = target;
    return PL_OK;
}

pl_status_t pl_log_configure(const char *level, const char *format, const char *target,
                             const char *origin)
{
    int lvl = level ? pl_log_level_parse(level) : (int)pl_log_level_g;
    int fmt = format ? pl_log_format_parse(format) : (int)s_format;
    int tgt = target ? pl_log_target_parse(target) : (int)s_target;
    if (lvl < 0)
        return pl_error(PL_ERR_INVALID, "%s: log level '%s' is not error, warn, info or debug",
                        origin, level);
    if (fmt < 0)
        return pl_error(PL_ERR_INVALID, "%s: log format '%s' is not text or json", origin, format);
    if (tgt < 0)
        return pl_error(PL_ERR_INVALID, "%s: log target '%s' is not stderr or journald", origin,
                        target);
    if (pl_log_set_target((pl_log_target_t)tgt))
        return pl_error_prefix(PL_ERR_UNSUPPORTED, "%s: ", origin);
    pl_log_set_level((pl_log_level_t)lvl);
    s_format = (pl_log_format_t)fmt;
    return PL_OK;
}

void pl_log_set_ident(const char *ident)
{
    snprintf(s_ident, sizeof(s_ident), "%s", ident ? ident : "");
}

void pl_log_set_node(const char *node)
{
    snprintf(s_node, sizeof(s_node), "%s", node ? node : "");
}

void pl_log_set_job(uint64_t job)
{
    s_job = job;
}

void pl_log_set_stream(FILE *stream)
{
    s_stream = stream;
}

/* Text: control bytes and DEL as \n, \t, \r or \xHH, and the backslash doubled, so a line is
 * one line and reads back unambiguously. JSON: a string body per RFC 8259 (bytes >= 0x80 are
 * passed as they are; the caller's text is UTF-8 or opaque). */
static void s_put_escaped(FILE *out, const char *s, int json)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if (c == '\\')
            fputs("\\\\", out);
        else if (c == '"' && json)
            fputs("\\\"", out);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c == '\r')
            fputs("\\r", out);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, json ? "\\u%04x" : "\\x%02x", c);
        else
            fputc(c, out);
    }
}

/* The formatted message, in `buf` when it fits, else in memory the caller frees (*heap_p). */
static const char *s_format_msg(char *buf, size_t size, char **heap_p, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(buf, size, fmt, ap);
    *heap_p = NULL;
    if (n < 0) {
        va_end(ap2);
        return "(unformattable log message)";
    }
    if ((size_t)n < size) {
        va_end(ap2);
        return buf;
    }
    size_t want = (size_t)n < S_MSG_MAX ? (size_t)n + 1 : S_MSG_MAX;
    char *heap = malloc(want);
    if (!heap) {
        va_end(ap2);
        memcpy(buf + size - 4, "...", 4);
        return buf;
    }
    vsnprintf(heap, want, fmt, ap2);
    va_end(ap2);
    if ((size_t)n >= want)
        memcpy(heap + want - 4, "...", 4);
    *heap_p = heap;
    return heap;
}

static void s_write_text(FILE *out, const struct timespec *ts, pl_log_level_t level,
                         const char *base, int line, const char *msg)
{
    struct tm tm;
    char when[32];
    gmtime_r(&ts->tv_sec, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    fprintf(out, "%s.%03ld ", when, ts->tv_nsec / 1000000);
    s_put_escaped(out, s_ident, 0);
    if (s_node[0]) {
        fputc('[', out);
        s_put_escaped(out, s_node, 0);
        fputc(']', out);
    }
    fprintf(out, " %s", pl_log_level_names[level]);
    if (s_job)
        fprintf(out, " job=%llu", (unsigned long long)s_job);
    fputs(": ", out);
    s_put_escaped(out, msg, 0);
    if (level == PL_LOG_DEBUG)
        fprintf(out, " (%s:%d)", base, line);
    fputc('\n', out);
}

static void s_write_json(FILE *out, const struct timespec *ts, pl_log_level_t level,
                         const char *base, int line, const char *msg)
{
    struct tm tm;
    char when[32];
    gmtime_r(&ts->tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(out, "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"process\":\"", when,
            ts->tv_nsec / 1000000, pl_log_level_names[level]);
    s_put_escaped(out, s_ident, 1);
    fputc('"', out);
    if (s_node[0]) {
        fputs(",\"node\":\"", out);
        s_put_escaped(out, s_node, 1);
        fputc('"', out);
    }
    if (s_job)
        fprintf(out, ",\"job\":%llu", (unsigned long long)s_job);
    fputs(",\"msg\":\"", out);
    s_put_escaped(out, msg, 1);
    fputs("\",\"source\":\"", out);
    s_put_escaped(out, base, 1);
    fprintf(out, ":%d\"}\n", line);
}

#ifdef PL_HAVE_LIBSYSTEMD
/* Journald keeps fields apart, so values go as they are (a newline stays inside MESSAGE);
 * PRIORITY follows syslog. Returns 0 when the journal took the entry. */
static int s_write_journal(pl_log_level_t level, const char *base, int line, const char *msg)
{
    static const int prio[] = {3, 4, 6, 7};
    char job[32] = "";
    /* sd_journal_send reports success when no journal listens; check, so the line is kept */
    if (access("/run/systemd/journal/socket", W_OK) != 0)
        return -1;
    if (s_job)
        snprintf(job, sizeof(job), "PIPELD_JOB=%llu", (unsigned long long)s_job);
    return sd_journal_send("MESSAGE=%s", msg, "PRIORITY=%d", prio[level], "SYSLOG_IDENTIFIER=%s",
                           s_ident, "PIPELD_NODE=%s", s_node[0] ? s_node : "-", "CODE_FILE=%s",
                           base, "CODE_LINE=%d", line, s_job ? job : NULL, NULL);
}
#endif

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
    struct timespec ts;
    char buf[1024], *heap;
    va_list ap;

    if ((unsigned)level > PL_LOG_DEBUG)
        level = PL_LOG_ERROR;
    clock_gettime(CLOCK_REALTIME, &ts);
    va_start(ap, fmt);
    const char *msg = s_format_msg(buf, sizeof(buf), &heap, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;

    pthread_mutex_lock(&s_lock);
#ifdef PL_HAVE_LIBSYSTEMD
    if (s_target == PL_LOG_JOURNALD && s_write_journal(level, base, line, msg) == 0)
        goto out; /* else: no journal listening, so the line goes to the stream below */
#endif
    FILE *out = s_stream ? s_stream : stderr;
    if (s_format == PL_LOG_JSON)
        s_write_json(out, &ts, level, base, line, msg);
    else
        s_write_text(out, &ts, level, base, line, msg);
    fflush(out);
#ifdef PL_HAVE_LIBSYSTEMD
out:
#endif
    pthread_mutex_unlock(&s_lock);
    free(heap);
}
