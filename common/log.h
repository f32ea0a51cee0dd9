/* Levelled logging; the level is checked before any formatting. The sink is stderr unless
 * redirected (tests capture it, daemons may send it to a file). */
#ifndef PL_COMMON_LOG_H
#define PL_COMMON_LOG_H

#include <stdio.h>

typedef enum { PL_LOG_ERROR = 0, PL_LOG_WARN, PL_LOG_INFO, PL_LOG_DEBUG } pl_log_level_t;

extern pl_log_level_t pl_log_level_g;

void pl_log_set_level(pl_log_level_t level);
/* Parse "error|warn|info|debug"; returns -1 when unknown. */
int pl_log_level_parse(const char *name);
/* Name shown in each line, e.g. "pipeld[node1]". Copied. */
void pl_log_set_ident(const char *ident);
/* Redirect output (NULL restores stderr). The stream is borrowed. */
void pl_log_set_stream(FILE *stream);
void pl_log_write(pl_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define pl_log_at(lvl, ...)                                                                        \
    do {                                                                                           \
        if ((lvl) <= pl_log_level_g)                                                               \
            pl_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);                                  \
    } while (0)
#define pl_log_error(...) pl_log_at(PL_LOG_ERROR, __VA_ARGS__)
#define pl_log_warn(...) pl_log_at(PL_LOG_WARN, __VA_ARGS__)
#define pl_log_info(...) pl_log_at(PL_LOG_INFO, __VA_ARGS__)
#define pl_log_debug(...) pl_log_at(PL_LOG_DEBUG, __VA_ARGS__)

#endif
