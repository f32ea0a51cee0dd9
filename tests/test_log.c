/* The log sink: text and JSON lines (JSON read back with jansson), escaping of outside strings,
 * the level check, redirection, the log_* config keys and flags, and journald's native protocol. */
#include "common/config.h"
#include "common/log.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <regex.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char *s_buf;
static size_t s_len;
static FILE *s_mem;

static void s_setup(void)
{
    s_mem = open_memstream(&s_buf, &s_len);
    cr_assert(s_mem);
    pl_log_set_stream(s_mem);
    pl_log_set_level(PL_LOG_INFO);
    pl_log_set_format(PL_LOG_TEXT);
    pl_log_set_ident("pipeld");
    pl_log_set_node("n1");
    pl_log_set_job(0);
}

static void s_teardown(void)
{
    pl_log_set_stream(NULL);
    fclose(s_mem);
    free(s_buf);
}

/* What was written so far (NUL-terminated by open_memstream after a flush). */
static const char *s_out(void)
{
    fflush(s_mem);
    return s_buf;
}

static size_t s_count(const char *s, char c)
{
    size_t n = 0;
    for (; *s; s++)
        n += *s == c;
    return n;
}

static void s_match(const char *text, const char *pattern)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    int rc = regexec(&re, text, 0, NULL, 0);
    regfree(&re);
    cr_assert_eq(rc, 0, "'%s' does not match /%s/", text, pattern);
}

/* The one JSON object of the output, checked to be a whole line. */
static json_t *s_json_line(void)
{
    const char *out = s_out();
    json_error_t err;
    cr_assert_eq(s_count(out, '\n'), 1, "not one line: %s", out);
    cr_assert_eq(out[strlen(out) - 1], '\n');
    json_t *j = json_loadb(out, strlen(out) - 1, 0, &err);
    cr_assert(j, "not JSON (%s): %s", err.text, out);
    return j;
}

TestSuite(log, .init = s_setup, .fini = s_teardown);

Test(log, text_line_has_time_process_node_job_level)
{
    pl_log_info("loaded %d layers", 12);
    s_match(s_out(),
            "^[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3} pipeld\\[n1\\] info: loaded 12 layers\n$");
    rewind(s_mem);
    pl_log_set_job(42);
    pl_log_set_node(NULL);
    pl_log_set_ident("pipecoord");
    pl_log_warn("slow");
    s_match(s_out(), "^[0-9:.]{12} pipecoord warn job=42: slow\n");
}

Test(log, debug_lines_name_their_source)
{
    pl_log_set_level(PL_LOG_DEBUG);
    int line = __LINE__ + 1;
    pl_log_debug("x");
    char want[64];
    snprintf(want, sizeof(want), " debug: x (test_log.c:%d)\n", line);
    cr_assert(strstr(s_out(), want), "%s", s_out());
}

Test(log, json_line_has_every_field)
{
    pl_log_set_format(PL_LOG_JSON);
    pl_log_set_job(7);
    int line = __LINE__ + 1;
    pl_log_error("stage %d failed", 2);
    json_t *j = s_json_line();
    cr_assert_str_eq(json_string_value(json_object_get(j, "level")), "error");
    cr_assert_str_eq(json_string_value(json_object_get(j, "process")), "pipeld");
    cr_assert_str_eq(json_string_value(json_object_get(j, "node")), "n1");
    cr_assert_eq(json_integer_value(json_object_get(j, "job")), 7);
    cr_assert_str_eq(json_string_value(json_object_get(j, "msg")), "stage 2 failed");
    char src[64];
    snprintf(src, sizeof(src), "test_log.c:%d", line);
    cr_assert_str_eq(json_string_value(json_object_get(j, "source")), src);
    const char *t = json_string_value(json_object_get(j, "time"));
    cr_assert(t);
    s_match(t, "^20[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$");
    json_decref(j);
}

Test(log, json_without_node_or_job_leaves_them_out)
{
    pl_log_set_format(PL_LOG_JSON);
    pl_log_set_node("");
    pl_log_info("up");
    json_t *j = s_json_line();
    cr_assert_null(json_object_get(j, "node"));
    cr_assert_null(json_object_get(j, "job"));
    json_decref(j);
}

/* Every byte 1..255 plus quotes and backslashes: JSON reads back the very string. */
Test(log, json_escapes_outside_strings_exactly)
{
    char nasty[300];
    size_t n = 0;
    for (int c = 1; c < 128; c++) /* ASCII, so the output stays valid UTF-8 for jansson */
        nasty[n++] = (char)c;
    memcpy(nasty + n, "\"}\\n\n", 6);
    pl_log_set_format(PL_LOG_JSON);
    pl_log_set_node("evil\"node\n");
    pl_log_info("%s", nasty);
    json_t *j = s_json_line();
    cr_assert_str_eq(json_string_value(json_object_get(j, "msg")), nasty);
    cr_assert_str_eq(json_string_value(json_object_get(j, "node")), "evil\"node\n");
    json_decref(j);
}

/* An identity with a newline and a forged second line stay on one line. */
Test(log, text_escapes_control_characters)
{
    pl_log_set_node("n1\n00:00:00.000 pipecoord error: forged");
    pl_log_info("peer said '%s'", "a\r\nb\tc\x1b[31m\\d\x7f");
    const char *out = s_out();
    cr_assert_eq(s_count(out, '\n'), 1, "%s", out);
    cr_assert(strstr(out, "pipeld[n1\\n00:00:00.000 pipecoord error: forged] info: "), "%s", out);
    cr_assert(strstr(out, "peer said 'a\\r\\nb\\tc\\x1b[31m\\\\d\\x7f'\n"), "%s", out);
}

static int s_evaluated;
static int s_side_effect(void)
{
    return ++s_evaluated;
}

Test(log, level_check_skips_formatting)
{
    pl_log_set_level(PL_LOG_WARN);
    pl_log_info("%d", s_side_effect());
    pl_log_debug("%d", s_side_effect());
    cr_assert_eq(s_evaluated, 0);
    cr_assert_str_eq(s_out(), "");
    pl_log_warn("%d", s_side_effect());
    cr_assert_eq(s_evaluated, 1);
    cr_assert(strstr(s_out(), " warn: 1\n"));
    pl_log_set_level(PL_LOG_ERROR);
    pl_log_warn("no");
    cr_assert_eq(s_count(s_out(), '\n'), 1);
}

Test(log, long_messages_whole_then_cut)
{
    size_t n = 5000;
    char *big = malloc(100000);
    memset(big, 'a', 99999);
    big[99999] = 0;
    big[n] = 0;
    pl_log_info("%s", big); /* beyond the stack buffer: whole */
    const char *out = s_out();
    cr_assert(strstr(out, big) && strstr(out, big)[n] == '\n');
    rewind(s_mem);
    big[n] = 'a';
    pl_log_info("%s|", big); /* beyond 64 KiB: cut, marked */
    out = s_out();
    size_t len = strlen(out);
    cr_assert_lt(len, 65536 + 64);
    cr_assert_gt(len, 65000);
    cr_assert_str_eq(out + len - 4, "...\n");
    free(big);
}

static void *s_other_thread(void *arg)
{
    (void)arg;
    pl_log_info("no job here");
    pl_log_set_job(99);
    pl_log_info("job here");
    return NULL;
}

Test(log, job_context_is_per_thread)
{
    pthread_t t;
    pl_log_set_job(5);
    cr_assert_eq(pthread_create(&t, NULL, s_other_thread, NULL), 0);
    pthread_join(t, NULL);
    pl_log_info("mine");
    const char *out = s_out();
    cr_assert(strstr(out, "pipeld[n1] info: no job here\n"), "%s", out);
    cr_assert(strstr(out, "pipeld[n1] info job=99: job here\n"), "%s", out);
    cr_assert(strstr(out, "pipeld[n1] info job=5: mine\n"), "%s", out);
}

Test(log, configure_by_name_all_or_nothing)
{
    cr_assert_eq(pl_log_configure("debug", "json", "stderr", "x.yaml"), PL_OK);
    cr_assert_eq(pl_log_level_g, PL_LOG_DEBUG);
    pl_log_info("j");
    json_decref(s_json_line());
    cr_assert_neq(pl_log_configure("warn", "xml", NULL, "x.yaml"), PL_OK);
    cr_assert(strstr(pl_error_msg(), "x.yaml: log format 'xml' is not text or json"), "%s",
              pl_error_msg());
    cr_assert_eq(pl_log_level_g, PL_LOG_DEBUG, "a failed call changed the level");
    cr_assert_neq(pl_log_configure("loud", NULL, NULL, "f"), PL_OK);
    cr_assert_neq(pl_log_configure(NULL, NULL, "syslog", "f"), PL_OK);
    cr_assert(strstr(pl_error_msg(), "log target 'syslog'"), "%s", pl_error_msg());
    cr_assert_eq(pl_log_configure(NULL, "text", NULL, "f"), PL_OK);
    cr_assert_eq(pl_log_level_g, PL_LOG_DEBUG, "NULL must leave the level");
}

/* The stream is borrowed and NULL returns to stderr (criterion captures fd 2). */
Test(log, redirect_back_to_stderr, .init = cr_redirect_stderr)
{
    pl_log_set_stream(NULL);
    pl_log_set_level(PL_LOG_INFO);
    pl_log_set_format(PL_LOG_TEXT);
    pl_log_set_ident("pipeld");
    pl_log_set_node("n2");
    pl_log_info("to stderr");
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char line[256] = "";
    cr_assert(fgets(line, sizeof(line), f));
    cr_assert(strstr(line, "pipeld[n2] info: to stderr\n"), "%s", line);
}

Test(log, config_keys_in_node_and_cluster_files)
{
    static pl_cfg_node_t node;
    static pl_cfg_cluster_t cl;
    const char *n1 = "name: a\ncoordinator: tcp://h:1\nlog_format: json\nlog_target: journald\n";
    cr_assert_eq(pl_cfg_node_parse(n1, strlen(n1), "n.yaml", &node), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(node.log_format, "json");
    cr_assert_str_eq(node.log_target, "journald");
    const char *n2 = "name: a\ncoordinator: tcp://h:1\n";
    cr_assert_eq(pl_cfg_node_parse(n2, strlen(n2), "n.yaml", &node), PL_OK);
    cr_assert_str_eq(node.log_format, "text");
    cr_assert_str_eq(node.log_target, "stderr");
    const char *n3 = "name: a\ncoordinator: tcp://h:1\nlog_format: xml\n";
    cr_assert_neq(pl_cfg_node_parse(n3, strlen(n3), "n.yaml", &node), PL_OK);
    cr_assert(strstr(pl_error_msg(), "n.yaml:3:") && strstr(pl_error_msg(), "log_format"), "%s",
              pl_error_msg());
    const char *c1 = "coordinator:\n  endpoint: tcp://0.0.0.0:5555\n  log_level: debug\n"
                     "  log_format: json\n";
    cr_assert_eq(pl_cfg_cluster_parse(c1, strlen(c1), "c.yaml", &cl), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(cl.log_level, "debug");
    cr_assert_str_eq(cl.log_format, "json");
    cr_assert_str_eq(cl.log_target, "stderr");
    const char *c2 = "coordinator:\n  endpoint: tcp://0.0.0.0:5555\n  log_target: file\n";
    cr_assert_neq(pl_cfg_cluster_parse(c2, strlen(c2), "c.yaml", &cl), PL_OK);
    cr_assert(strstr(pl_error_msg(), "c.yaml:3:") && strstr(pl_error_msg(), "log_target"), "%s",
              pl_error_msg());
}

/* The binaries refuse a bad flag with exit 2 and say which. */
Test(log, flags_of_the_binaries)
{
    char cmd[1024];
    const char *bin = getenv("PL_BIN_DIR") ? getenv("PL_BIN_DIR") : PL_BIN_DIR;
    snprintf(cmd, sizeof(cmd), "%s/pipecoord --log-format xml 2>&1 | grep -q \"log format 'xml'\"",
             bin);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof(cmd), "%s/pipecoord --log-format xml >/dev/null 2>&1", bin);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof(cmd), "%s/pipeld --log-target syslog >/dev/null 2>&1", bin);
    cr_assert_eq(WEXITSTATUS(system(cmd)), 2);
}

/* Journald's native protocol: a datagram of fields, "KEY=value\n", or for a value holding a
 * newline "KEY\n" + little-endian 64-bit length + value + "\n". Finds `key`'s value. */
static int s_journal_field(const char *d, size_t n, const char *key, char *val, size_t cap)
{
    size_t klen = strlen(key), i = 0;
    while (i < n) {
        const char *nl = memchr(d + i, '\n', n - i);
        const char *eq = memchr(d + i, '=', n - i);
        if (!nl)
            return -1;
        if (eq && eq < nl) {
            size_t k = (size_t)(eq - (d + i)), vl = (size_t)(nl - eq - 1);
            if (k == klen && memcmp(d + i, key, k) == 0 && vl < cap) {
                memcpy(val, eq + 1, vl);
                val[vl] = 0;
                return 0;
            }
            i = (size_t)(nl - d) + 1;
        } else {
            size_t k = (size_t)(nl - (d + i));
            uint64_t vl = 0;
            if ((size_t)(nl - d) + 9 > n)
                return -1;
            for (int b = 7; b >= 0; b--)
                vl = vl << 8 | (unsigned char)nl[1 + b];
            const char *v = nl + 9;
            if (vl > n - (size_t)(v - d) - 1)
                return -1;
            if (k == klen && memcmp(d + i, key, k) == 0 && vl < cap) {
                memcpy(val, v, vl);
                val[vl] = 0;
                return 0;
            }
            i = (size_t)(v - d) + vl + 1;
        }
    }
    return -1;
}

/* In a private mount namespace a tmpfs hides /run, so the test's own socket stands where
 * journald's would be, and the host's journal (if any) is never written. */
Test(log, journald_native_fields)
{
    if (!pl_log_journald_built()) {
        cr_assert_neq(pl_log_set_target(PL_LOG_JOURNALD), PL_OK);
        cr_skip_test("built without libsystemd: journald is refused (checked), not sent");
    }
    if (unshare(CLONE_NEWNS) != 0)
        cr_skip_test("unshare(CLONE_NEWNS): %s (needs root)", strerror(errno));
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0, "%s", strerror(errno));
    if (mount("tmpfs", "/run", "tmpfs", 0, NULL) != 0)
        cr_skip_test("tmpfs on /run: %s", strerror(errno));
    cr_assert_eq(mkdir("/run/systemd", 0755), 0);
    cr_assert_eq(mkdir("/run/systemd/journal", 0755), 0);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "/run/systemd/journal/socket");
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));

    cr_assert_eq(pl_log_set_target(PL_LOG_JOURNALD), PL_OK);
    pl_log_set_job(31);
    int line = __LINE__ + 1;
    pl_log_warn("two\nlines %s", "and \"quotes\"");
    pl_log_set_target(PL_LOG_STDERR);
    cr_assert_str_eq(s_out(), "", "the journal took it, so the stream gets nothing");

    char d[65536], v[256];
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n = recv(fd, d, sizeof(d), 0);
    cr_assert_gt(n, 0, "no datagram: %s", strerror(errno));
    cr_assert_eq(s_journal_field(d, (size_t)n, "MESSAGE", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "two\nlines and \"quotes\"");
    cr_assert_eq(s_journal_field(d, (size_t)n, "PRIORITY", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "4");
    cr_assert_eq(s_journal_field(d, (size_t)n, "SYSLOG_IDENTIFIER", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "pipeld");
    cr_assert_eq(s_journal_field(d, (size_t)n, "PIPELD_NODE", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "n1");
    cr_assert_eq(s_journal_field(d, (size_t)n, "PIPELD_JOB", v, sizeof(v)), 0);
    cr_assert_str_eq(v, "31");
    cr_assert_eq(s_journal_field(d, (size_t)n, "CODE_LINE", v, sizeof(v)), 0);
    cr_assert_eq(atoi(v), line);
    close(fd);
}

/* No journal listening: the line is not lost but goes to the stream. */
Test(log, journald_absent_falls_back_to_the_stream)
{
    if (!pl_log_journald_built())
        cr_skip_test("built without libsystemd");
    if (unshare(CLONE_NEWNS) != 0)
        cr_skip_test("unshare(CLONE_NEWNS): %s (needs root)", strerror(errno));
    cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
    if (mount("tmpfs", "/run", "tmpfs", 0, NULL) != 0)
        cr_skip_test("tmpfs on /run: %s", strerror(errno));
    cr_assert_eq(pl_log_set_target(PL_LOG_JOURNALD), PL_OK);
    pl_log_error("kept");
    pl_log_set_target(PL_LOG_STDERR);
    cr_assert(strstr(s_out(), "pipeld[n1] error: kept\n"), "%s", s_out());
}

static void s_flood(int n)
{
    for (int i = 0; i < n; i++)
        pl_log_warn_limited("bad message %d", i);
}

Test(log, a_flood_is_rate_limited_and_counted)
{
    s_flood(1000);
    cr_assert_eq(s_count(s_out(), '\n'), PL_LOG_BURST, "%s", s_out());
    usleep(1100 * 1000); /* the next window: the first line says what was left out */
    s_flood(1);
    cr_assert_eq(s_count(s_out(), '\n'), PL_LOG_BURST + 2, "%s", s_out());
    cr_assert(strstr(s_out(), "(990 more like the next suppressed)"), "%s", s_out());
    cr_assert(strstr(s_out(), "bad message 0\n"), "%s", s_out());
}
