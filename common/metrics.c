/* The metrics registry: families of series under one mutex (updates are a few per microbatch,
 * scrapes a few per minute), and their rendering as Prometheus text format 0.0.4. */
#include "common/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char label[PL_METRICS_LABEL_MAX];
    double value;                                /* counter, gauge */
    double sum;                                  /* histogram */
    uint64_t counts[PL_METRICS_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last: +Inf */
} s_series_t;

struct pl_metric {
    pl_metrics_t *reg;
    pl_metric_kind_t kind;
    char name[96], help[256], label[32];
    double bounds[PL_METRICS_MAX_BUCKETS];
    int n_bounds;
    int n_series;
    s_series_t series[PL_METRICS_MAX_SERIES];
};

struct pl_metrics {
    pthread_mutex_t lock;
    int n;
    pl_metric_t *fam[PL_METRICS_MAX_FAMILIES];
};

pl_status_t pl_metrics_new(pl_metrics_t **metrics_p)
{
    pl_metrics_t *r = calloc(1, sizeof(*r));
    if (!r)
        return pl_error(PL_ERR_NOMEM, "metrics registry: out of memory");
    pthread_mutex_init(&r->lock, NULL);
    *metrics_p = r;
    return PL_OK;
}

void pl_metrics_destroy(pl_metrics_t **metrics_p)
{
    pl_metrics_t *r = *metrics_p;
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        free(r->fam[i]);
    pthread_mutex_destroy(&r->lock);
    free(r);
    *metrics_p = NULL;
}

static bool s_valid_name(const char *s, bool colon)
{
    if (!s || !*s || strlen(s) >= 96)
        return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        bool alpha =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
        if (!alpha && !(p > s && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

static bool s_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static pl_status_t s_register(pl_metrics_t *r, pl_metric_kind_t kind, const char *name,
                              const char *help, const char *label, const double *bounds,
                              int n_bounds, pl_metric_t **metric_p)
{
    if (!s_valid_name(name, true))
        return pl_error(PL_ERR_INVALID, "metric '%s': not a Prometheus metric name",
                        name ? name : "");
    if (kind == PL_METRIC_COUNTER && !s_ends_with(name, "_total"))
        return pl_error(PL_ERR_INVALID, "metric '%s': a counter's name ends in _total", name);
    if (label && (!s_valid_name(label, false) || strlen(label) >= 32 || !strcmp(label, "le") ||
                  !strncmp(label, "__", 2)))
        return pl_error(PL_ERR_INVALID, "metric '%s': label '%s' is not a label name", name, label);
    if (!help || strlen(help) >= 256 || strchr(help, '\n') || strchr(help, '\\'))
        return pl_error(PL_ERR_INVALID, "metric '%s': help must be one line without '\\'", name);
    if (kind == PL_METRIC_HISTOGRAM) {
        if (n_bounds < 1 || n_bounds > PL_METRICS_MAX_BUCKETS)
            return pl_error(PL_ERR_RANGE, "metric '%s': %d buckets, 1 to %d allowed", name,
                            n_bounds, PL_METRICS_MAX_BUCKETS);
        for (int i = 0; i < n_bounds; i++)
            if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
                return pl_error(PL_ERR_INVALID,
                                "metric '%s': bucket bounds must be finite and "
                                "increasing",
                                name);
    }
    pl_metric_t *m = calloc(1, sizeof(*m));
    if (!m)
        return pl_error(PL_ERR_NOMEM, "metric '%s': out of memory", name);
    m->reg = r;
    m->kind = kind;
    snprintf(m->name, sizeof(m->name), "%s", name);
    snprintf(m->help, sizeof(m->help), "%s", help);
    snprintf(m->label, sizeof(m->label), "%s", label ? label : "");
    if (kind == PL_METRIC_HISTOGRAM) {
        memcpy(m->bounds, bounds, (size_t)n_bounds * sizeof(double));
        m->n_bounds = n_bounds;
    }
    pthread_mutex_lock(&r->lock);
    pl_status_t st = PL_OK;
    for (int i = 0; i < r->n && !st; i++)
        if (!strcmp(r->fam[i]->name, name))
            st = pl_error(PL_ERR_INVALID, "metric '%s' is registered twice", name);
    if (!st && r->n == PL_METRICS_MAX_FAMILIES)
        st = pl_error(PL_ERR_RANGE, "metric '%s': the registry is full (%d)", name,
                      PL_METRICS_MAX_FAMILIES);
    if (!st)
        r->fam[r->n++] = m;
    pthread_mutex_unlock(&r->lock);
    if (st) {
        free(m);
        return st;
    }
    *metric_p = m;
    return PL_OK;
}

pl_status_t pl_metrics_counter(pl_metrics_t *r, const char *name, const char *help,
                               const char *label, pl_metric_t **metric_p)
{
    return s_register(r, PL_METRIC_COUNTER, name, help, label, NULL, 0, metric_p);
}

pl_status_t pl_metrics_gauge(pl_metrics_t *r, const char *name, const char *help, const char *label,
                             pl_metric_t **metric_p)
{
    return s_register(r, PL_METRIC_GAUGE, name, help, label, NULL, 0, metric_p);
}

pl_status_t pl_metrics_histogram(pl_metrics_t *r, const char *name, const char *help,
                                 const char *label, const double *bounds, int n_bounds,
                                 pl_metric_t **metric_p)
{
    return s_register(r, PL_METRIC_HISTOGRAM, name, help, label, bounds, n_bounds, metric_p);
}

/* The series of a label value, created when new; NULL when the family is full. Locked. */
static s_series_t *s_series(pl_metric_t *m, const char *label_value)
{
    char key[PL_METRICS_LABEL_MAX];
    snprintf(key, sizeof(key), "%s", m->label[0] && label_value ? label_value : "");
    for (int i = 0; i < m->n_series; i++)
        if (!strcmp(m->series[i].label, key))
            return &m->series[i];
    if (m->n_series == PL_METRICS_MAX_SERIES)
        return NULL;
    s_series_t *s = &m->series[m->n_series++];
    memset(s, 0, sizeof(*s));
    memcpy(s->label, key, sizeof(key));
    return s;
}

static void s_update(pl_metric_t *m, pl_metric_kind_t kind, const char *label_value, double v,
                     int op)
{
    if (!m || isnan(v))
        return;
    if (m->kind != kind && !(kind == PL_METRIC_COUNTER && m->kind == PL_METRIC_GAUGE))
        return;
    if (m->kind == PL_METRIC_COUNTER && v < 0)
        return;
    pthread_mutex_lock(&m->reg->lock);
    s_series_t *s = s_series(m, label_value);
    if (s) {
        if (op == 0)
            s->value += v;
        else if (op == 1)
            s->value = v;
        else {
            int b = 0;
            while (b < m->n_bounds && v > m->bounds[b])
                b++;
            s->counts[b]++;
            s->sum += v;
        }
    }
    pthread_mutex_unlock(&m->reg->lock);
}

void pl_metrics_add(pl_metric_t *m, const char *label_value, double v)
{
    s_update(m, PL_METRIC_COUNTER, label_value, v, 0);
}

void pl_metrics_set(pl_metric_t *m, const char *label_value, double v)
{
    s_update(m, PL_METRIC_GAUGE, label_value, v, 1);
}

void pl_metrics_observe(pl_metric_t *m, const char *label_value, double v)
{
    s_update(m, PL_METRIC_HISTOGRAM, label_value, v, 2);
}

void pl_metrics_clear(pl_metric_t *m)
{
    if (!m || m->kind != PL_METRIC_GAUGE)
        return;
    pthread_mutex_lock(&m->reg->lock);
    m->n_series = 0;
    pthread_mutex_unlock(&m->reg->lock);
}

/* A label value escaped as the format wants: backslash, double quote and line feed. */
static void s_put_label(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void s_put_value(FILE *f, double v)
{
    if (isinf(v))
        fputs(v > 0 ? "+Inf" : "-Inf", f);
    else { /* the shortest text that reads back as the same double: 0.1, not 0.1000...01 */
        char buf[32];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof(buf), "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
        fputs(buf, f);
    }
}

/* `{label="value"` plus an optional le, closed; nothing at all without either. */
static void s_put_labels(FILE *f, const pl_metric_t *m, const s_series_t *s, const double *le)
{
    bool lab = m->label[0] != '\0';
    if (!lab && !le)
        return;
    fputc('{', f);
    if (lab) {
        fprintf(f, "%s=\"", m->label);
        s_put_label(f, s->label);
        fputc('"', f);
    }
    if (le) {
        fprintf(f, "%sle=\"", lab ? "," : "");
        s_put_value(f, *le);
        fputc('"', f);
    }
    fputc('}', f);
}

static void s_render(FILE *f, const pl_metric_t *m)
{
    static const char *types[] = {"counter", "gauge", "histogram"};
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, types[m->kind]);
    for (int i = 0; i < m->n_series; i++) {
        const s_series_t *s = &m->series[i];
        if (m->kind != PL_METRIC_HISTOGRAM) {
            fputs(m->name, f);
            s_put_labels(f, m, s, NULL);
            fputc(' ', f);
            s_put_value(f, s->value);
            fputc('\n', f);
            continue;
        }
        uint64_t cum = 0;
        for (int b = 0; b <= m->n_bounds; b++) {
            double le = b < m->n_bounds ? m->bounds[b] : INFINITY;
            cum += s->counts[b];
            fprintf(f, "%s_bucket", m->name);
            s_put_labels(f, m, s, &le);
            fprintf(f, " %llu\n", (unsigned long long)cum);
        }
        fprintf(f, "%s_sum", m->name);
        s_put_labels(f, m, s, NULL);
        fputc(' ', f);
        s_put_value(f, s->sum);
        fprintf(f, "\n%s_count", m->name);
        s_put_labels(f, m, s, NULL);
        fprintf(f, " %llu\n", (unsigned long long)cum);
    }
}

pl_status_t pl_metrics_render(pl_metrics_t *r, char **text_p, size_t *len_p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return pl_error(PL_ERR_NOMEM, "metrics: out of memory");
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n; i++)
        s_render(f, r->fam[i]);
    pthread_mutex_unlock(&r->lock);
    if (fclose(f) != 0) {
        free(buf);
        return pl_error(PL_ERR_NOMEM, "metrics: out of memory");
    }
    *text_p = buf;
    *len_p = len;
    return PL_OK;
}
