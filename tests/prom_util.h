/* A Prometheus text format 0.0.4 parser for the metrics suites, independent of the code under
 * test, and promtool's verdict on a page where Debian's prometheus is installed. */
#ifndef PL_TESTS_PROM_UTIL_H
#define PL_TESTS_PROM_UTIL_H

#include "cluster_util.h"
#include "common/metrics.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>

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

static inline int p_family(const p_page_t *p, const char *name)
{
    for (int i = 0; i < p->n_fam; i++)
        if (!strcmp(p->fam[i], name))
            return i;
    return -1;
}

static inline int p_valid_name(const char *s)
{
    if (!(isalpha((unsigned char)*s) || *s == '_' || *s == ':'))
        return 0;
    for (s++; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == ':'))
            return 0;
    return 1;
}

static inline int p_ends(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* The family a sample belongs to: its own name, or a histogram's base name. */
static inline int p_owner(const p_page_t *p, const char *name)
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
static inline int p_check_labels(const char *l, char *err, size_t elen)
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
static inline int p_parse(const char *text, p_page_t *p, char *err, size_t elen)
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
static inline double p_value(const p_page_t *p, const char *name, const char *labels)
{
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name) && !strcmp(p->s[i].labels, labels ? labels : ""))
            return p->s[i].value;
    return NAN;
}

/* Sum over every label set of a name. */
static inline double p_sum(const p_page_t *p, const char *name)
{
    double t = 0;
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->s[i].name, name))
            t += p->s[i].value;
    return t;
}

/* promtool's verdict on a page, when it is installed: 0 clean, -1 absent, else its code. */
static inline int p_promtool(const char *text)
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

#endif
