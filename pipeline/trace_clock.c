/* The process's trace clock against the coordinator's: each heartbeat's round trip (WELCOME
 * carries the coordinator's wall clock) bounds the skew; the tightest recent one is kept. */
#include "pipeline/trace.h"

#include "common/util.h"

#include <pthread.h>
#include <time.h>

#define S_KEEP_S 60.0 /* a round trip is replaced by any later one after this long */

static pthread_mutex_t s_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t s_sent_ns;       /* wall clock of the request in flight; 0: none */
static int64_t s_best_rtt = -1; /* of the kept round trip; -1: none yet */
static double s_best_at;        /* pl_now() of the kept round trip */
static int64_t s_correction;    /* from the kept round trip */

int64_t pl_trace_clock_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t pl_trace_clock_correction(int64_t sent_ns, int64_t coord_ns, int64_t recv_ns)
{
    int64_t half = (recv_ns - sent_ns) / 2, skew = coord_ns - (sent_ns + half);
    if (half < 0)
        return 0; /* the local clock stepped back: nothing learned */
    if (skew > half)
        return skew - half;
    if (skew < -half)
        return skew + half;
    return 0;
}

void pl_trace_clock_sent(void)
{
    int64_t now = pl_trace_clock_wall_ns();
    pthread_mutex_lock(&s_mu);
    s_sent_ns = now;
    pthread_mutex_unlock(&s_mu);
}

void pl_trace_clock_answer(int64_t coord_ns)
{
    int64_t now = pl_trace_clock_wall_ns();
    double mono = pl_now();
    pthread_mutex_lock(&s_mu);
    int64_t sent = s_sent_ns, rtt = now - sent;
    s_sent_ns = 0; /* one answer per request: a late second WELCOME is not paired with it */
    if (coord_ns > 0 && sent > 0 && rtt >= 0 &&
        (s_best_rtt < 0 || rtt <= s_best_rtt || mono - s_best_at > S_KEEP_S)) {
        s_best_rtt = rtt;
        s_best_at = mono;
        s_correction = pl_trace_clock_correction(sent, coord_ns, now);
    }
    pthread_mutex_unlock(&s_mu);
}

int64_t pl_trace_clock_correction_ns(void)
{
    pthread_mutex_lock(&s_mu);
    int64_t c = s_correction;
    pthread_mutex_unlock(&s_mu);
    return c;
}
