/* Levelled logging, one line per event with its process, node and job; the level is checked
 * before any formatting. Text or JSON lines to stderr (or a redirected stream), or journald. */
#ifndef PL_COMMON_LOG_H
#define PL_COMMON_LOG_H

#include "common/status.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum { PL_LOG_ERROR = 0, PL_LOG_WARN, PL_LOG_INFO, PL_LOG_DEBUG } pl_log_level_t;
typedef enum { PL_LOG_TEXT = 0, PL_LOG_JSON } pl_log_format_t;
typedef enum { PL_LOG_STDERR = 0, PL_LOG_JOURNALD } pl_log_target_t;

extern pl_log_level_t pl_log_level_g;
/* The names of the levels, formats and targets in enum order, NULL-terminated (the config
 * files' choices). */
extern const char *const pl_log_level_names[];
extern const char *const pl_log_format_names[];
extern const char *const pl_log_target_names[];

void pl_log_set_level(pl_log_level_t level);
/* Parse "error|warn|info|debug"; returns -1 when unknown. */
int pl_log_level_parse(const char *name);
/* Parse "text|json"; returns -1 when unknown. */
int pl_log_format_parse(const char *name);
/* Parse "stderr|journald"; returns -1 when unknown. */
int pl_log_target_parse(const char *name);
void pl_log_set_format(pl_log_format_t format);
/* Journald needs a build with libsystemd (pl_log_journald_built); an error otherwise. */
pl_status_t pl_log_set_target(pl_log_target_t target);
/* Apply settings by name (a NULL one is left as it is); on an unknown name or a target this
 * build lacks nothing changes and the error names `origin` and the value. */
pl_status_t pl_log_configure(const char *level, const char *format, const char *target,
                             const char *origin);
/* True when this build can send to journald. */
int pl_log_journald_built(void);
/* Process name shown in each line, e.g. "pipeld". Copied (at most 63 bytes). */
void pl_log_set_ident(const char *ident);
/* The node this process is (pipeld's name); NULL or "" for none. Copied (at most 63 bytes). */
void pl_log_set_node(const char *node);
/* The job the calling thread works on, for its following lines; 0 for none. */
void pl_log_set_job(uint64_t job);
/* Redirect text/JSON output (NULL restores stderr). The stream is borrowed. */
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
