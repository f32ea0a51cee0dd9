/* Levelled logging; the level is checked before any formatting. The sink is stderr unless
 * redirected (tests capture it, daemons may send it to a file). Every line is one line: control
 * bytes in the message (from names and text that came from outside) are written as \xNN. */
#ifndef PL_COMMON_LOG_H
#define PL_COMMON_LOG_H

#include <stdbool.h>
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
/* Per call site: at most PL_LOG_BURST lines per second; the next line that passes says how many
 * were left out. For messages an outsider can cause at will (bad messages, refused requests). */
#define PL_LOG_BURST 10
typedef struct {
    double window;
    int count;
    long suppressed;
} pl_log_limit_t;
/* Whether a line may go now; *suppressed_p: lines left out before it (reported once). */
bool pl_log_limit_pass(pl_log_limit_t *l, long *suppressed_p);

#define pl_log_limited(lvl, ...)                                                                   \
    do {                                                                                           \
        static pl_log_limit_t pl_lim_;                                                             \
        long pl_sup_;                                                                              \
        if ((lvl) <= pl_log_level_g && pl_log_limit_pass(&pl_lim_, &pl_sup_)) {                    \
            if (pl_sup_)                                                                           \
                pl_log_write((lvl), __FILE__, __LINE__, "(%ld more like the next suppressed)",     \
                             pl_sup_);                                                             \
            pl_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);                                  \
        }                                                                                          \
    } while (0)
#define pl_log_warn_limited(...) pl_log_limited(PL_LOG_WARN, __VA_ARGS__)
#define pl_log_info_limited(...) pl_log_limited(PL_LOG_INFO, __VA_ARGS__)

#define pl_log_error(...) pl_log_at(PL_LOG_ERROR, __VA_ARGS__)
#define pl_log_warn(...) pl_log_at(PL_LOG_WARN, __VA_ARGS__)
#define pl_log_info(...) pl_log_at(PL_LOG_INFO, __VA_ARGS__)
#define pl_log_debug(...) pl_log_at(PL_LOG_DEBUG, __VA_ARGS__)

#endif
