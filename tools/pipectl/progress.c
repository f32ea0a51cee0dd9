/* Following a job to its end: its state changes, and its progress redrawn in place on stderr on a
 * terminal, otherwise one plain line per change. A generation job shows a bar (sequences done /
 * total, tokens, tokens/s, ETA, each stage's busy share: the STATUS reply's progress and stages);
 * a training job its own line (train.c). */
#include "tools/pipectl/pipectl.h"

#include "common/util.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define S_POLL_US (200 * 1000)
#define S_BAR 24

#define S_STR pl_pipectl_str
#define S_NUM pl_pipectl_num

static volatile sig_atomic_t s_stop;

static void s_on_sigint(int sig)
{
    (void)sig;
    s_stop = 1;
}

/* The progress figures of a STATUS reply as one line: "3/8 seqs, 120/512 tokens, ..."; whether
 * the job runs (else there is nothing new to show). */
static bool s_figures(const json_t *r, char *b, size_t n)
{
    const json_t *pg = json_object_get(r, "progress");
    double gen = S_NUM(pg, "generated"), most = S_NUM(pg, "at_most"), tps = S_NUM(pg, "tok_s");
    size_t k = (size_t)snprintf(b, n, "%d/%d seqs, %.0f/%.0f tokens, %.1f tok/s",
                                (int)S_NUM(pg, "sequences_done"), (int)S_NUM(pg, "sequences"), gen,
                                most, tps);
    if (k < n && tps > 0 && most > gen)
        k += (size_t)snprintf(b + k, n - k, ", ETA %.0f s", (most - gen) / tps);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(r, "stages"), i, s)
    {
        if (k < n)
            k += (size_t)snprintf(b + k, n - k, "%s s%zu %.0f%%", i ? "" : " | busy", i,
                                  S_NUM(s, "busy_pct"));
    }
    return !strcmp(S_STR(r, "state"), "running");
}

/* The bar: done share of the tokens at most (sequences ending early end it sooner). */
static void s_bar(const json_t *r, const char *figures)
{
    const json_t *pg = json_object_get(r, "progress");
    double most = S_NUM(pg, "at_most"), seqs = S_NUM(pg, "sequences");
    double f = most > 0 ? S_NUM(pg, "generated") / most : 0;
    if (seqs > 0 && S_NUM(pg, "sequences_done") / seqs > f)
        f = S_NUM(pg, "sequences_done") / seqs;
    int fill = (int)(PL_MIN(1.0, f) * S_BAR + 0.5);
    char bar[S_BAR + 1];
    for (int i = 0; i < S_BAR; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[S_BAR] = '\0';
    fprintf(stderr, "\r\033[K[%s] %3.0f%% %s", bar, 100.0 * PL_MIN(1.0, f), figures);
}

int pl_pipectl_follow_with(pl_pipectl_t *c, int64_t id, const pl_pipectl_follow_t *how)
{
    char last[32] = "", shown[512] = "";
    double t0 = pl_now(), shown_at = 0;
    bool tty = isatty(STDERR_FILENO), up = false;
    struct sigaction sa = {.sa_handler = s_on_sigint}, old;
    int rc;
    sigaction(SIGINT, &sa, &old);
    for (;;) {
        json_t *r;
        if (s_stop) { /* Ctrl-C stops following; the job goes on (pipectl cancel stops it) */
            fprintf(stderr, "%spipectl: stopped following job %lld\n", up ? "\n" : "",
                    (long long)id);
            rc = 1;
            break;
        }
        if ((rc = pl_pipectl_call_job(c, PL_MSG_STATUS, id, &r)))
            break;
        char state[32], line[512];
        snprintf(state, sizeof(state), "%s", S_STR(r, "state"));
        if (strcmp(state, last)) {
            const char *note = S_STR(r, "note");
            fprintf(stderr, "%spipectl: job %lld %s after %.1f s%s%s\n", up ? "\n" : "",
                    (long long)id, state, pl_now() - t0, strcmp(note, "-") && *note ? ": " : "",
                    strcmp(note, "-") ? note : "");
            snprintf(last, sizeof(last), "%s", state);
            up = false;
        }
        bool end = !strcmp(state, "done") || !strcmp(state, "failed") || !strcmp(state, "canceled");
        bool news = how->line(r, line, sizeof(line));
        if ((news || (end && up)) && strcmp(line, shown)) {
            if (tty) {
                if (how->draw)
                    how->draw(r, line);
                else
                    fprintf(stderr, "\r\033[K%s", line);
                fflush(stderr);
                up = true;
            } else if (pl_now() - shown_at >= 1.0 || end) { /* a line per change, at most 1/s */
                fprintf(stderr, "pipectl: job %lld: %s after %.1f s\n", (long long)id, line,
                        pl_now() - t0);
                shown_at = pl_now();
            }
            snprintf(shown, sizeof(shown), "%s", line);
        }
        if (end) {
            if (up)
                fputc('\n', stderr);
            rc = strcmp(state, "done") ? 1 : how->done ? how->done(c, id, r) : 0;
            json_decref(r);
            break;
        }
        json_decref(r);
        usleep(S_POLL_US);
    }
    sigaction(SIGINT, &old, NULL);
    return rc;
}

static int s_results(pl_pipectl_t *c, int64_t id, const json_t *r)
{
    (void)r;
    return pl_pipectl_results_of(c, id);
}

int pl_pipectl_follow(pl_pipectl_t *c, int64_t id, bool results)
{
    const pl_pipectl_follow_t how = {s_figures, s_bar, results ? s_results : NULL};
    return pl_pipectl_follow_with(c, id, &how);
}
