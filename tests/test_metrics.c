/* The metrics registry (common/metrics.c): exact exposition text for known updates, checked by
 * a Prometheus text-format parser written here (and promtool where Debian's prometheus is
 * installed) as the independent reference; misuse refused; concurrent updates lose nothing. */
#include "prom_util.h"

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
    int pt = p_promtool(text);
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
