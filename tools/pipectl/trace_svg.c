/* A job's pipeline timeline as SVG: a row per stage, compute slices coloured by microbatch,
 * receive waits grey, sends dark, idle time white, a time axis and a legend. */
#include "tools/pipectl/trace.h"

#include <math.h>
#include <string.h>

#define S_LEFT 230 /* the label column */
#define S_RIGHT 16
#define S_TOP 70           /* title and legend above the rows */
#define S_BAR 28           /* a row's bar height, inside PL_PIPECTL_SVG_ROW */
#define S_TITLES_MAX 20000 /* hover titles only up to this many events (file size) */
#define S_N_COLORS 12

static const char *const s_colors[S_N_COLORS] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                 "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
                                                 "#9c755f", "#17becf", "#bcbd22", "#1f3f8f"};
#define S_RECV_COLOR "#d0d0d0"
#define S_SEND_COLOR "#404040"

/* Text from the wire (node and device names) with XML's special characters escaped. */
static void s_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            fputs("&amp;", f);
            break;
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* A tick step from 1, 2, 5 times a power of ten giving at most 10 ticks over span_ms. */
static double s_tick(double span_ms)
{
    double step = pow(10, floor(log10(span_ms / 10)));
    if (span_ms / step > 10)
        step *= 2;
    if (span_ms / step > 10)
        step *= 2.5;
    if (span_ms / step > 10)
        step *= 2;
    return step;
}

static void s_legend(FILE *f, int n_mb)
{
    int x = 8, shown = n_mb < S_N_COLORS ? n_mb : S_N_COLORS;
    for (int m = 0; m < shown; m++, x += 58)
        fprintf(f,
                "<rect x=\"%d\" y=\"40\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"51\">mb %d%s</text>\n",
                x, s_colors[m], x + 16, m, n_mb > S_N_COLORS && m == shown - 1 ? "+" : "");
    fprintf(f,
            "<rect x=\"%d\" y=\"40\" width=\"12\" height=\"12\" fill=\"" S_RECV_COLOR "\"/>"
            "<text x=\"%d\" y=\"51\">waiting to receive</text>\n"
            "<rect x=\"%d\" y=\"46\" width=\"12\" height=\"6\" fill=\"" S_SEND_COLOR "\"/>"
            "<text x=\"%d\" y=\"51\">send</text>\n"
            "<rect x=\"%d\" y=\"40\" width=\"12\" height=\"12\" fill=\"#ffffff\" stroke=\"#999\"/>"
            "<text x=\"%d\" y=\"51\">idle (bubble)</text>\n",
            x, x + 16, x + 140, x + 156, x + 210, x + 226);
    if (n_mb > S_N_COLORS)
        fprintf(f, "<text x=\"%d\" y=\"51\">(microbatch m has colour m mod %d)</text>\n", x + 330,
                S_N_COLORS);
}

static void s_axis(FILE *f, int n, double span_ms, double plot_w)
{
    int y = S_TOP + n * PL_PIPECTL_SVG_ROW + 6;
    double step = s_tick(span_ms);
    bool secs = span_ms >= 10000;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>\n", S_LEFT, y,
            S_LEFT + plot_w, y);
    for (int k = 0; k * step <= span_ms * (1 + 1e-9); k++) {
        double v = k * step, x = S_LEFT + v / span_ms * plot_w;
        char label[32];
        if (secs)
            snprintf(label, sizeof(label), "%g s", v / 1000);
        else
            snprintf(label, sizeof(label),
                     step >= 1     ? "%.0f ms"
                     : step >= 0.1 ? "%.1f ms"
                                   : "%.2f ms",
                     v);
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>"
                "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
                x, y, x, y + 5, x, y + 18, label);
    }
    fprintf(f,
            "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">time since the "
            "job's first traced event</text>\n",
            S_LEFT + plot_w / 2, y + 36);
}

/* Stage s's row: its label, busy share, and every slice. Returns its compute ns. */
static int64_t s_row(FILE *f, const pl_pipectl_trace_t *t, int s, double span, double plot_w,
                     bool titles)
{
    const pl_msg_trace_reply_t *r = &t->st[s];
    const pl_msg_trace_t *tr = r->trace;
    int y = S_TOP + s * PL_PIPECTL_SVG_ROW, by = y + (PL_PIPECTL_SVG_ROW - S_BAR) / 2;
    int64_t busy = 0;
    for (int i = 0; tr && i < tr->n_events; i++)
        if (tr->events[i].kind == PL_TRACE_COMPUTE)
            busy += tr->events[i].dur_ns;
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#ffffff\" "
            "stroke=\"#cccccc\"/>\n",
            S_LEFT, by, plot_w, S_BAR);
    fprintf(f, "<text x=\"8\" y=\"%d\" font-weight=\"bold\">stage %d \xc2\xb7 ", y + 17, s);
    s_text(f, r->node);
    fputs(" \xc2\xb7 ", f);
    s_text(f, r->device);
    fprintf(f, "</text>\n<text x=\"8\" y=\"%d\" fill=\"#555\">layers %d-%d \xc2\xb7 ", y + 32,
            r->first, r->last);
    if (tr)
        fprintf(f, "busy %.0f%%%s</text>\n", 100.0 * (double)busy / span,
                tr->recorded > tr->n_events ? " \xc2\xb7 oldest dropped" : "");
    else
        fputs("no trace</text>\n", f);
    for (int i = 0; tr && i < tr->n_events; i++) {
        const pl_msg_trace_event_t *e = &tr->events[i];
        double x = S_LEFT + (double)pl_pipectl_trace_start(t, s, i) / span * plot_w;
        double w = fmax((double)e->dur_ns / span * plot_w, 0.3);
        int ry = by, rh = S_BAR;
        const char *fill = e->kind == PL_TRACE_RECV ? S_RECV_COLOR : S_SEND_COLOR;
        if (e->kind == PL_TRACE_COMPUTE)
            fill = s_colors[e->mb % S_N_COLORS];
        else if (e->kind == PL_TRACE_SEND)
            ry = by + S_BAR - 6, rh = 6;
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">", x, ry, w,
                rh, fill);
        if (titles)
            fprintf(f, "<title>%s mb %u step %u: %.3f ms</title>",
                    e->kind == PL_TRACE_COMPUTE ? "compute"
                    : e->kind == PL_TRACE_RECV  ? "waiting to receive"
                                                : "send",
                    e->mb, e->step, (double)e->dur_ns / 1e6);
        fputs("</rect>\n", f);
    }
    return busy;
}

pl_status_t pl_pipectl_trace_svg_write(const pl_pipectl_trace_t *t, FILE *f)
{
    int n = t->n_stages, n_mb = 0, traced = 0;
    int64_t events = 0, busy = 0;
    double span = (double)(t->end_ns - t->origin_ns),
           plot_w = PL_PIPECTL_SVG_WIDTH - S_LEFT - S_RIGHT;
    if (span <= 0)
        span = 1;
    for (int s = 0; s < n; s++) {
        const pl_msg_trace_t *tr = t->st[s].trace;
        traced += tr != NULL;
        for (int i = 0; tr && i < tr->n_events; i++, events++)
            if (tr->events[i].kind == PL_TRACE_COMPUTE && (int)tr->events[i].mb + 1 > n_mb)
                n_mb = (int)tr->events[i].mb + 1;
    }
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" "
            "font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n",
            PL_PIPECTL_SVG_WIDTH, PL_PIPECTL_SVG_HEIGHT(n), PL_PIPECTL_SVG_WIDTH,
            PL_PIPECTL_SVG_HEIGHT(n));
    s_legend(f, n_mb);
    for (int s = 0; s < n; s++)
        busy += s_row(f, t, s, span, plot_w, events <= S_TITLES_MAX);
    s_axis(f, n, span / 1e6, plot_w);
    double share = traced ? 100.0 * (double)busy / (span * traced) : 0;
    fprintf(f,
            "<text x=\"8\" y=\"22\" font-size=\"15\" font-weight=\"bold\">job %u \xc2\xb7 %d "
            "stages \xc2\xb7 %d microbatches \xc2\xb7 %.3f ms \xc2\xb7 stages busy %.0f%%, idle "
            "(bubbles) %.0f%%</text>\n</svg>\n",
            t->job, n, n_mb, span / 1e6, share, 100 - share);
    return ferror(f) ? pl_error(PL_ERR_IO, "trace: cannot write the SVG") : PL_OK;
}
