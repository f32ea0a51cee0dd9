/* The metrics registry and the /metrics pages: exact exposition text for known updates, a
 * Prometheus text-format parser written here (and promtool where Debian's prometheus is
 * installed) as the independent reference, counters that move while a real job runs on a
 * local cluster, and /readyz turning 503 when the coordinator is killed. */
#include "cluster_util.h"
#include "common/metrics.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>

/* ---- a Prometheus text format 0.0.4 parser, independent of the code under test ---- */

#define P_MAX_SAMPLES 4096

typedef struct {
    char name[128];
    char labels[256]; /* as written between the braces, "" when none */
    double value;
} p_sample_t;

typedef struct {
    int n;
    p_sample_t s[P_MAX_SAMPLES];
    int n_fam;
    char fam[256][128];
    char type[256][16];
} p_page_t;

static int p_family(const p_page_t *p, const char *name)
{
    for (int i = 0; i < p->n_fam; i++)
        if (!strcmp(p->fam[i], name))
            return i;
    return -1;
}

static int p_valid_name(const char *s)
{
    if (!(isalpha((unsigned char)*s) || *s == '_' || *s == ':'))
        return 0;
    for (s++; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == ':'))
            return 0;
    return 1;
}

static int p_ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The family a sample belongs to: its own name, or a histogram's base name. */
static int p_owner(const p_page_t *p, const char *name)
{
    int f = p_family(p, name);
    if (f >= 0)
        return f;
    static const char *suf[] = {"_bucket", "_sum", "_count"};
    for (int k = 0; k < 3; k++) {
        if (!p_ends(name, suf[k]))
            continue;
        char base[128];
        snprintf(base, sizeof(base), "%.*s", (int)(strlen(name) - strlen(suf[k])), name);
        f = p_family(p, base);
        if (f >= 0 && !strcmp(p->type[f], "histogram"))
            return f;
    }
    return -1;
}

/* Check the labels text: name="value" pairs, escapes only \\ \" \n. */
static int p_check_labels(const char *l, char *err, size_t elen)
{
    while (*l) {
        const char *eq = strchr(l, '=');
        if (!eq || eq[1] != '"') {
            snprintf(err, elen, "label without =\"");
            return 0;
        }
        char lname[64];
        snprintf(lname, sizeof(lname), "%.*s", (int)(eq - l), l);
        if (!p_valid_name(lname) || strchr(lname, ':')) {
            snprintf(err, elen, "bad label name '%s'", lname);
            return 0;
        }
        const char *v = eq + 2;
        while (*v && *v != '"') {
            if (*v == '\\') {
                if (v[1] != '\\' && v[1] != '"' && v[1] != 'n') {
                    snprintf(err, elen, "bad escape");
                    return 0;
                }
                v++;
            }
            v++;
        }
        if (*v != '"') {
            snprintf(err, elen, "unterminated label value");
            return 0;
        }
        l = v + 1;
        if (*l == ',')
            l++;
        else if (*l) {
            snprintf(err, elen, "junk after a label");
            return 0;
        }
    }
    return 1;
}

/* Parse and check a whole page; 0 with a reason in err when it breaks the format. */
static int p_parse(const char *text, p_page_t *p, char *err, size_t elen)
{
    memset(p, 0, sizeof(*p));
    int line_no = 0;
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        if (!nl) {
            snprintf(err, elen, "the last line has no line feed");
            return 0;
        }
        char buf[1024];
        snprintf(buf, sizeof(buf), "%.*s", (int)(nl - line), line);
        line = nl + 1;
        line_no++;
        if (!buf[0])
            continue;
        if (buf[0] == '#') {
            char kw[8], name[128], rest[512] = "";
            if (sscanf(buf, "# %7s %127s %511[^\n]", kw, name, rest) < 2) {
                snprintf(err, elen, "line %d: bad comment", line_no);
                return 0;
            }
            if (!strcmp(kw, "TYPE")) {
                if (strcmp(rest, "counter") && strcmp(rest, "gauge") && strcmp(rest, "histogram")) {
                    snprintf(err, elen, "line %d: type '%s'", line_no, rest);
                    return 0;
                }
                if (p_family(p, name) >= 0) {
                    snprintf(err, elen, "line %d: %s typed twice", line_no, name);
                    return 0;
                }
                if (!strcmp(rest, "counter") && !p_ends(name, "_total")) {
                    snprintf(err, elen, "line %d: counter %s lacks _total", line_no, name);
                    return 0;
                }
                snprintf(p->fam[p->n_fam], 128, "%s", name);
                snprintf(p->type[p->n_fam++], 16, "%s", rest);
            } else if (!strcmp(kw, "HELP") && !rest[0]) {
                snprintf(err, elen, "line %d: empty help", line_no);
                return 0;
            }
            continue;
        }
        p_sample_t *s = &p->s[p->n];
        char *brace = strchr(buf, '{'), *sp;
        if (brace) {
            char *close = strrchr(buf, '}');
            if (!close || close < brace) {
                snprintf(err, elen, "line %d: unclosed labels", line_no);
                return 0;
            }
            *brace = '\0';
            *close = '\0';
            snprintf(s->name, sizeof(s->name), "%.127s", buf);
            snprintf(s->labels, sizeof(s->labels), "%.255s", brace + 1);
            sp = close + 1;
            if (!p_check_labels(s->labels, err, elen))
                return 0;
        } else {
            sp = strchr(buf, ' ');
            if (!sp) {
                snprintf(err, elen, "line %d: no value", line_no);
                return 0;
            }
            *sp = '\0';
            snprintf(s->name, sizeof(s->name), "%.127s", buf);
            sp++;
        }
        while (*sp == ' ')
            sp++;
        char *end;
        s->value = strtod(sp, &end);
        if (end == sp || (*end && *end != ' ')) {
            snprintf(err, elen, "line %d: value '%s'", line_no, sp);
            return 0;
        }
        if (!p_valid_name(s->name)) {
            snprintf(err, elen, "line %d: name '%s'", line_no, s->name);
            return 0;
        }
        int f = p_owner(p, s->name);
        if (f < 0) {
            snprintf(err, elen, "line %d: %s has no TYPE before it", line_no, s->name);
            return 0;
        }
        if (!strcmp(p->type[f], "counter") && s->value < 0) {
            snprintf(err, elen, "line %d: negative counter", line_no);
            return 0;
        }
        if (p->n++ == P_MAX_SAMPLES) {
            snprintf(err, elen, "too many samples");
            return 0;
        }
    }
    /* histograms: buckets cumulative, the +Inf bucket equal to _count, _sum present */
    for (int f = 0; f < p->n_fam; f++) {
        if (strcmp(p->type[f], "histogram"))
            continue;
        double prev = -1, prev_le = -INFINITY, inf = -1, count = -1;
        int have_sum = 0;
        char bucket[140], sum[140], cnt[140];
        snprintf(bucket, sizeof(bucket), "%s_bucket", p->fam[f]);
        snprintf(sum, sizeof(sum), "%s_sum", p->fam[f]);
        snprintf(cnt, sizeof(cnt), "%s_count", p->fam[f]);
        for (int i = 0; i < p->n; i++) {
            const p_sample_t *s = &p->s[i];
            if (!strcmp(s->name, bucket)) {
                const char *le = strstr(s->labels, "le=\"");
                if (!le) {
                    snprintf(err, elen, "%s without le", bucket);
                    return 0;
                }
                double v = strtod(le + 4, NULL);
                if (v < prev_le) /* a new series (label set) starts again */
                    prev = -1;
                if (s->value < prev) {
                    snprintf(err, elen, "%s not cumulative", bucket);
                    return 0;
                }
                prev = s->value;
                prev_le = v;
                if (isinf(v))
                    inf = s->value;
            } else if (!strcmp(s->name, sum)) {
                have_sum = 1;
            } else if (!strcmp(s->name, cnt)) {
                count = s->value;
                if (count != inf) {
                    snprintf(err, elen, "%s: _count %g != +Inf bucket %g", p->fam[f], count, inf);
                    return 0;
                }
                if (!have_sum) {
                    snprintf(err, elen, "%s: _count without _sum", p->fam[f]);
                    return 0;
                }
                prev = -1, prev_le = -INFINITY, inf = -1, have_sum = 0;
            }
        }
    }
    return 1;
}

/* A sample's value; NAN when absent. */
static double p_value(const p_page_t *p, const char *name, const char *labels)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels ? labels : ""))
            return p->s[i].value;
    return NAN;
}

/* Sum over every label set of a name. */
static double p_sum(const p_page_t *p, const char *name)
{
    double t = 0;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name))
            t += p->s[i].value;
    return t;
}

/* promtool's verdict on a page, when it is installed: 0 clean, -1 absent, else its code. */
static int s_promtool(const char *text)
{
    if (access("/usr/bin/promtool", X_OK) != 0)
        return -1;
    char path[] = "/tmp/pl-metrics-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char *out;
    int rc = tc_sh(&out, "/usr/bin/promtool check metrics < %s 2>&1", path);
    if (rc)
        cr_log_error("promtool: %s", out);
    free(out);
    unlink(path);
    return rc;
}

/* ---- the registry ---- */

Test(metrics, exact_exposition_text)
{
    pl_metrics_t *r = NULL;
    pl_metric_t *c, *g, *h, *hl;
    cr_assert_eq(pl_metrics_new(&r), PL_OK);
    cr_assert_eq(pl_metrics_counter(r, "x_bytes_total", "Bytes.", "peer", &c), PL_OK);
    cr_assert_eq(pl_metrics_gauge(r, "x_depth", "Depth.", NULL, &g), PL_OK);
    cr_assert_eq(pl_metrics_histogram(r, "x_seconds", "Time.", NULL, (double[]){0.5, 1, 2}, 3, &h),
                 PL_OK);
    cr_assert_eq(
        pl_metrics_histogram(r, "y_seconds", "Time by kind.", "kind", (double[]){1}, 1, &hl),
        PL_OK);
    pl_metrics_add(c, "a", 10);
    pl_metrics_add(c, "b\"q\\\n", 2.5);
    pl_metrics_add(c, "a", 5);
    pl_metrics_add(c, "a", -3); /* a counter never goes down */
    pl_metrics_set(g, NULL, 7);
    pl_metrics_add(g, NULL, -2);
    pl_metrics_observe(h, NULL, 0.5); /* on the bound: in that bucket (le is <=) */
    pl_metrics_observe(h, NULL, 0.75);
    pl_metrics_observe(h, NULL, 3);
    pl_metrics_observe(h, NULL, 0.1);
    pl_metrics_observe(hl, "x", 2);
    pl_metrics_observe(NULL, NULL, 1); /* no-ops */
    pl_metrics_add(NULL, NULL, 1);
    pl_metrics_observe(c, "a", 1); /* the wrong kind: ignored */
    char *text;
    size_t len;
    cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
    const char *want = "# HELP x_bytes_total Bytes.\n"
                       "# TYPE x_bytes_total counter\n"
                       "x_bytes_total{peer=\"a\"} 15\n"
                       "x_bytes_total{peer=\"b\\\"q\\\\\\n\"} 2.5\n"
                       "# HELP x_depth Depth.\n"
                       "# TYPE x_depth gauge\n"
                       "x_depth 5\n"
                       "# HELP x_seconds Time.\n"
                       "# TYPE x_seconds histogram\n"
                       "x_seconds_bucket{le=\"0.5\"} 2\n"
                       "x_seconds_bucket{le=\"1\"} 3\n"
                       "x_seconds_bucket{le=\"2\"} 3\n"
                       "x_seconds_bucket{le=\"+Inf\"} 4\n"
                       "x_seconds_sum 4.35\n"
                       "x_seconds_count 4\n"
                       "# HELP y_seconds Time by kind.\n"
                       "# TYPE y_seconds histogram\n"
                       "y_seconds_bucket{kind=\"x\",le=\"1\"} 0\n"
                       "y_seconds_bucket{kind=\"x\",le=\"+Inf\"} 1\n"
                       "y_seconds_sum{kind=\"x\"} 2\n"
                       "y_seconds_count{kind=\"x\"} 1\n";
    cr_assert_str_eq(text, want);
    cr_assert_eq(len, strlen(want));
    static p_page_t page;
    char err[256];
    cr_assert(p_parse(text, &page, err, sizeof(err)), "%s", err);
    int pt = s_promtool(text);
    cr_assert(pt == 0 || pt == -1, "promtool refused the page (%d)", pt);
    free(text);
    pl_metrics_clear(g);
    cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
    cr_assert(!strstr(text, "x_depth 5"), "a cleared gauge keeps its series");
    cr_assert(strstr(text, "# TYPE x_depth gauge\n"));
    free(text);
    pl_metrics_destroy(&r);
    cr_assert_null(r);
    pl_metrics_destroy(&r);
}

Test(metrics, misuse_is_refused)
{
    pl_metrics_t *r = NULL;
    pl_metric_t *m = (pl_metric_t *)0x1;
    cr_assert_eq(pl_metrics_new(&r), PL_OK);
    cr_assert_eq(pl_metrics_counter(r, "no_suffix", "h", NULL, &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_gauge(r, "9lives", "h", NULL, &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_gauge(r, "a-b", "h", NULL, &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_gauge(r, "ok", "h", "le", &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_gauge(r, "ok", "h", "a:b", &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_gauge(r, "ok", "two\nlines", NULL, &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_histogram(r, "h", "h", NULL, (double[]){2, 1}, 2, &m), PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_histogram(r, "h", "h", NULL, (double[]){INFINITY}, 1, &m),
                 PL_ERR_INVALID);
    cr_assert_eq(pl_metrics_histogram(r, "h", "h", NULL, (double[]){1}, 0, &m), PL_ERR_RANGE);
    cr_assert_eq(m, (pl_metric_t *)0x1, "output set on error");
    cr_assert_eq(pl_metrics_gauge(r, "ok", "h", NULL, &m), PL_OK);
    cr_assert_eq(pl_metrics_gauge(r, "ok", "h", NULL, &m), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "twice"), "%s", pl_error_msg());
    /* the series of a family are bounded */
    pl_metric_t *l;
    cr_assert_eq(pl_metrics_gauge(r, "many", "h", "k", &l), PL_OK);
    for (int i = 0; i < PL_METRICS_MAX_SERIES + 10; i++) {
        char v[16];
        snprintf(v, sizeof(v), "%d", i);
        pl_metrics_set(l, v, i);
    }
    char *text;
    size_t len;
    cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
    int n = 0;
    for (char *p = text; (p = strstr(p, "\nmany{")); p++)
        n++;
    cr_assert_eq(n, PL_METRICS_MAX_SERIES);
    free(text);
    pl_metrics_destroy(&r);
}

typedef struct {
    pl_metric_t *c, *h;
} s_pair_t;

static void *s_adder(void *arg)
{
    s_pair_t *p = arg;
    for (int i = 0; i < 20000; i++) {
        pl_metrics_add(p->c, (i & 1) ? "odd" : "even", 1);
        pl_metrics_observe(p->h, NULL, 0.25);
    }
    return NULL;
}

Test(metrics, concurrent_updates_lose_nothing)
{
    pl_metrics_t *r = NULL;
    s_pair_t p;
    cr_assert_eq(pl_metrics_new(&r), PL_OK);
    cr_assert_eq(pl_metrics_counter(r, "n_total", "n", "parity", &p.c), PL_OK);
    cr_assert_eq(pl_metrics_histogram(r, "d_seconds", "d", NULL, (double[]){0.1, 1}, 2, &p.h),
                 PL_OK);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, s_adder, &p);
    for (int k = 0; k < 50; k++) { /* render while they write */
        char *text;
        size_t len;
        cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
        free(text);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    char *text;
    size_t len;
    cr_assert_eq(pl_metrics_render(r, &text, &len), PL_OK);
    static p_page_t page;
    char err[256];
    cr_assert(p_parse(text, &page, err, sizeof(err)), "%s", err);
    cr_assert_eq(p_value(&page, "n_total", "parity=\"odd\""), 80000);
    cr_assert_eq(p_value(&page, "n_total", "parity=\"even\""), 80000);
    cr_assert_eq(p_value(&page, "d_seconds_bucket", "le=\"0.1\""), 0);
    cr_assert_eq(p_value(&page, "d_seconds_bucket", "le=\"1\""), 160000);
    cr_assert_eq(p_value(&page, "d_seconds_sum", NULL), 40000);
    free(text);
    pl_metrics_destroy(&r);
}

Test(metrics, the_test_parser_refuses_broken_pages)
{
    static p_page_t page;
    char err[256];
    const char *bad[] = {
        "x 1\n",                                /* no TYPE */
        "# TYPE x counter\nx 1\n",              /* counter without _total */
        "# TYPE x_total counter\nx_total -1\n", /* negative counter */
        "# TYPE x gauge\nx{a=\"1} 2\n",         /* unterminated label */
        "# TYPE x gauge\nx{a=1} 2\n",           /* unquoted label */
        "# TYPE x gauge\nx abc\n",              /* not a number */
        "# TYPE x gauge\nx 1",                  /* no final line feed */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        cr_assert(!p_parse(bad[i], &page, err, sizeof(err)), "page %zu accepted", i);
    cr_assert(p_parse("# HELP g A gauge.\n# TYPE g gauge\ng{a=\"x\\\"y\"} 1.5e3\n", &page, err,
                      sizeof(err)),
              "%s", err);
    cr_assert_eq(p_value(&page, "g", "a=\"x\\\"y\""), 1500);
}

/* ---- the pages of a live local cluster ---- */

static tc_cluster_t s_c;
static int s_passed;
static int s_port[3]; /* coordinator, node0, node1 */

static void s_teardown(void)
{
    tc_cluster_end(&s_c, s_passed);
}

/* GET a page with curl: the status code, and the body into *body_p. */
static int s_get(int port, const char *path, char **body_p)
{
    char *out;
    tc_sh(&out, "curl -s -m 5 -o %s/page.txt -w '%%{http_code}' http://127.0.0.1:%d%s", s_c.dir,
          port, path);
    int code = atoi(out);
    free(out);
    if (body_p)
        tc_sh(body_p, "cat %s/page.txt", s_c.dir);
    return code;
}

static void s_page(int port, p_page_t *page)
{
    char *text, err[256];
    cr_assert_eq(s_get(port, "/metrics", &text), 200);
    cr_assert(p_parse(text, page, err, sizeof(err)), "port %d: %s\n%s", port, err, text);
    int pt = s_promtool(text);
    cr_assert(pt == 0 || pt == -1, "promtool refused port %d's page (%d):\n%s", port, pt, text);
    free(text);
}

static void s_start(void)
{
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    char bin[512], log[512], http[3][32], db[512];
    for (int i = 0; i < 3; i++) {
        s_port[i] = tc_free_port();
        snprintf(http[i], sizeof(http[i]), "127.0.0.1:%d", s_port[i]);
    }
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord.log", s_c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir); /* its own state: no earlier jobs */
    s_c.coord = tc_spawn((char *[]){bin, "--endpoint", s_c.ep, "--http", http[0], "--state-db", db,
                                    "--log-level", "debug", NULL},
                         log);
    snprintf(bin, sizeof(bin), "%s/pipeld", tc_bin());
    for (int i = 0; i < 2; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", i);
        snprintf(log, sizeof(log), "%s/%s.log", s_c.dir, name);
        s_c.node[s_c.n_nodes++] =
            tc_spawn((char *[]){bin, "--name", name, "--coordinator", s_c.ep, "--threads", "1",
                                "--http", http[1 + i], NULL},
                     log);
    }
    cr_assert_eq(tc_wait_idle(&s_c, 2, 60), 0, "nodes did not register");
    char path[512];
    snprintf(path, sizeof(path), "%s/prompts.jsonl", s_c.dir);
    tc_write(path, "[1, 15, 27, 99]\n[1, 7]\n[1, 100, 101, 102, 103]\n[3, 200, 5]\n");
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 4 --hidden 64 --intermediate 160 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 3 "
                               "--max-pos 512"),
                 0);
}

/* Every metric the Grafana dashboard queries is one the processes declare. */
static void s_dashboard_names_exist(const p_page_t *coord, const p_page_t *node)
{
    char *text;
    tc_sh(&text, "cat %s/etc/grafana/pipeld.json", PL_SOURCE_DIR);
    json_t *d = json_loads(text, 0, NULL);
    cr_assert_not_null(d, "etc/grafana/pipeld.json is not JSON");
    json_decref(d);
    int seen = 0;
    for (char *p = text; (p = strstr(p, "pipe"));) {
        if (strncmp(p, "pipecoord_", 10) && strncmp(p, "pipeld_", 7)) {
            p++;
            continue;
        }
        char name[128];
        size_t n = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
        snprintf(name, sizeof(name), "%.*s", (int)n, p);
        p += n;
        static const char *suf[] = {"_bucket", "_sum", "_count"};
        for (int k = 0; k < 3; k++)
            if (p_ends(name, suf[k]))
                name[strlen(name) - strlen(suf[k])] = '\0';
        cr_assert(p_family(coord, name) >= 0 || p_family(node, name) >= 0,
                  "the dashboard queries %s, which no process exports", name);
        seen++;
    }
    cr_assert_gt(seen, 10);
    free(text);
}

TestSuite(metrics_cluster, .fini = s_teardown, .timeout = 120);

Test(metrics_cluster, counters_move_while_a_job_runs)
{
    static p_page_t before[3], after[3];
    s_start();
    usleep(600 * 1000); /* the coordinator sweeps its state into the metrics 4 times a second */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(s_get(s_port[i], "/livez", NULL), 200);
        cr_assert_eq(s_get(s_port[i], "/readyz", NULL), 200, "port %d not ready", s_port[i]);
        cr_assert_eq(s_get(s_port[i], "/nope", NULL), 404);
        s_page(s_port[i], &before[i]);
    }
    cr_assert_eq(p_value(&before[0], "pipecoord_nodes", "state=\"idle\""), 2);
    cr_assert_eq(p_value(&before[0], "pipecoord_jobs", "state=\"done\""), 0);
    cr_assert_eq(p_value(&before[1], "pipeld_microbatches_total", NULL), 0);

    /* 4 sequences of 12 new tokens over 2 stages, in 2 microbatches */
    tc_job(&s_c, "j", "m", "max_new_tokens: 12\nstages: 2\nmicrobatches: 2\n");
    int rc;
    char *got = tc_submit(&s_c, "j", &rc);
    cr_assert_eq(rc, 0, "pipectl failed: %s", tc_err(&s_c, "j"));
    free(got);
    usleep(1500 * 1000); /* a heartbeat and a sweep later */
    for (int i = 0; i < 3; i++)
        s_page(s_port[i], &after[i]);

    const p_page_t *co = &after[0];
    cr_assert_eq(p_value(co, "pipecoord_jobs", "state=\"done\""), 1);
    cr_assert_eq(p_value(co, "pipecoord_queue_depth", NULL), 0);
    cr_assert_eq(p_value(co, "pipecoord_job_duration_seconds_count", "state=\"done\""), 1);
    cr_assert_gt(p_value(co, "pipecoord_job_duration_seconds_sum", "state=\"done\""), 0);
    /* every sequence gets its 12 tokens (no stop at EOS unless sampled: at most 48) */
    double tok = p_value(co, "pipecoord_tokens_generated_total", NULL);
    cr_assert(tok >= 4 && tok <= 48, "coordinator counted %g tokens", tok);
    /* the daemons: both computed, the last stage's node sampled what the coordinator counted,
     * both sent activations or tokens to the other stage, and they hold no KV slots now */
    double node_tok = 0, mb0 = 0, mb1 = 0;
    for (int i = 1; i < 3; i++) {
        const p_page_t *p = &after[i];
        double mb = p_value(p, "pipeld_microbatches_total", NULL);
        cr_assert_gt(mb, 0, "node%d computed nothing", i - 1);
        cr_assert_eq(p_value(p, "pipeld_stage_compute_seconds_count", NULL), mb,
                     "one compute observation per microbatch step");
        cr_assert_gt(p_sum(p, "pipeld_link_bytes_total"), 0, "node%d sent nothing", i - 1);
        cr_assert_eq(p_value(p, "pipeld_kv_slots_used", NULL), 0, "node%d keeps KV slots", i - 1);
        cr_assert_eq(p_value(p, "pipeld_heartbeat_misses_total", NULL), 0);
        node_tok += p_value(p, "pipeld_tokens_generated_total", NULL);
        if (i == 1)
            mb0 = mb;
        else
            mb1 = mb;
    }
    cr_assert_eq(node_tok, tok, "daemons counted %g tokens, the coordinator %g", node_tok, tok);
    cr_assert_eq(mb0, mb1, "both stages run every microbatch step");
    s_dashboard_names_exist(&after[0], &after[1]);
    s_passed = 1;
}

Test(metrics_cluster, readyz_turns_503_when_the_coordinator_is_killed)
{
    s_start();
    cr_assert_eq(s_get(s_port[1], "/readyz", NULL), 200);
    kill(s_c.coord, SIGKILL);
    waitpid(s_c.coord, NULL, 0);
    s_c.coord = 0;
    /* dead_after is 3 s by default: not ready within that and a little more */
    int code = 200;
    for (int k = 0; k < 80 && code == 200; k++) {
        usleep(100 * 1000);
        code = s_get(s_port[1], "/readyz", NULL);
    }
    cr_assert_eq(code, 503);
    char *body = NULL;
    for (int k = 0; k < 30 && (code = s_get(s_port[2], "/readyz", &body)) == 200; k++) {
        free(body);
        usleep(100 * 1000);
    }
    cr_assert_eq(code, 503, "node1 still ready");
    cr_assert(strstr(body, "coordinator has not answered"), "%s", body);
    free(body);
    cr_assert_eq(s_get(s_port[1], "/livez", NULL), 200, "alive all the same");
    static p_page_t page;
    s_page(s_port[1], &page);
    cr_assert_gt(p_value(&page, "pipeld_heartbeat_misses_total", NULL), 0);
    /* a coordinator back at the same endpoint: the daemons register again and are ready */
    char bin[512], log[512], db[512];
    snprintf(bin, sizeof(bin), "%s/pipecoord", tc_bin());
    snprintf(log, sizeof(log), "%s/pipecoord2.log", s_c.dir);
    snprintf(db, sizeof(db), "%s/coord.db", s_c.dir);
    s_c.coord = tc_spawn((char *[]){bin, "--endpoint", s_c.ep, "--state-db", db, NULL}, log);
    for (int k = 0; k < 100 && (code = s_get(s_port[1], "/readyz", NULL)) != 200; k++)
        usleep(100 * 1000);
    cr_assert_eq(code, 200, "node0 not ready again after the coordinator came back");
    s_passed = 1;
}
