/* Logging: every line is one line whatever the message holds (control bytes escaped), and a
 * rate-limited call site lets PL_LOG_BURST lines a second through, then says how many it left
 * out. */
#include "common/log.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *s_capture(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    char *buf = calloc(1, (size_t)n + 1);
    rewind(f);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    return buf;
}

static int s_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

Test(log, outside_strings_cannot_forge_a_line)
{
    FILE *f = tmpfile();
    pl_log_set_stream(f);
    pl_log_warn("peer '%s': bad", "x\n12:00:00.000 pipecoord info: node0 registered\r\x1b[2J\\");
    pl_log_set_stream(NULL);
    char *out = s_capture(f);
    cr_assert_eq(s_lines(out), 1, "%s", out);
    cr_assert(strstr(out, "peer 'x\\x0a12:00:00.000 pipecoord info: node0 registered"
                          "\\x0d\\x1b[2J\\\\': bad"),
              "%s", out);
    free(out);
    fclose(f);
}

static void s_flood(int n)
{
    for (int i = 0; i < n; i++)
        pl_log_warn_limited("bad message %d", i);
}

Test(log, a_flood_is_rate_limited_and_counted)
{
    FILE *f = tmpfile();
    pl_log_set_stream(f);
    s_flood(1000);
    char *out = s_capture(f);
    cr_assert_eq(s_lines(out), PL_LOG_BURST, "%s", out);
    free(out);
    usleep(1100 * 1000); /* the next window: the first line says what was left out */
    s_flood(1);
    pl_log_set_stream(NULL);
    out = s_capture(f);
    cr_assert_eq(s_lines(out), PL_LOG_BURST + 2, "%s", out);
    cr_assert(strstr(out, "(990 more like the next suppressed)"), "%s", out);
    cr_assert(strstr(out, "bad message 0\n"), "%s", out);
    free(out);
    fclose(f);
}
