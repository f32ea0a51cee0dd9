/* Integration: the heterogeneous planner in the running system. A slowed-down daemon gets fewer
 * layers and the stages' measured compute matches the plan's prediction; `pipectl plan` on the
 * live cluster (described clusters: test_plan_whatif); a lost node is left out of the next plan
 * and a node that joins is taken back. The tests of this suite take a file lock so that they
 * never run at the same time (the timing comparison needs a quiet machine). */
#include "plan_cluster_util.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <sys/file.h>

#define S_LOCK "/tmp/pl-test-plan-cluster.lock"

static int s_lock_fd = -1;

static void s_init(void)
{
    s_lock_fd = open(S_LOCK, O_RDWR | O_CREAT, 0666);
    if (s_lock_fd >= 0)
        flock(s_lock_fd, LOCK_EX);
}

static void s_fini(void)
{
    if (s_c.coord > 0 && !s_passed)
        tc_dump_logs(&s_c);
    tc_cluster_stop(&s_c);
    if (s_passed && s_c.dir[0] && !getenv("PL_TEST_KEEP")) /* a failed test keeps its files */
        tc_sh(NULL, "rm -rf %s", s_c.dir);
    if (s_lock_fd >= 0)
        close(s_lock_fd); /* releases the lock */
}

TestSuite(plan_cluster, .init = s_init, .fini = s_fini, .timeout = 300);

static json_t *s_json(const char *fmt, ...)
{
    char args[1024], *out;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    int rc =
        tc_sh(&out, "%s/pipectl -c %s --timeout 5 -o json %s 2>/dev/null", tc_bin(), s_c.ep, args);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    cr_assert(rc == 0 && json_is_object(j), "pipectl %s: rc %d, not JSON (%s): %s", args, rc,
              e.text, out);
    free(out);
    return j;
}

/* Start pipeld `name` with one thread and a node file setting `extra` (may be ""). */
static void s_node(const char *name, const char *extra)
{
    char file[64], cmd[1024], log[512];
    snprintf(file, sizeof(file), "%s.yaml", name);
    s_write(file, "name: %s\ncoordinator: %s\n%s", name, s_c.ep, extra);
    snprintf(log, sizeof(log), "%s/%s.log", s_c.dir, name);
    snprintf(cmd, sizeof(cmd), "exec %s/pipeld --config %s/%s --threads 1", tc_bin(), s_c.dir,
             file);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    s_c.node[s_c.n_nodes++] = tc_spawn(argv, log);
}

static void s_cluster(int n_nodes, const char *node1_extra)
{
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    tc_start_coord(&s_c, s_c.ep);
    for (int i = 0; i < n_nodes; i++) {
        char name[16];
        snprintf(name, sizeof(name), "node%d", i);
        s_node(name, i == 1 && node1_extra ? node1_extra : "");
    }
    cr_assert_eq(tc_wait_idle(&s_c, n_nodes, 60), 0, "nodes did not register");
}

static int s_submit_wait(const char *job)
{
    return tc_sh(NULL, "%s/pipectl -c %s --timeout 5 submit %s/%s --wait >/dev/null 2>>%s/err",
                 tc_bin(), s_c.ep, s_c.dir, job, s_c.dir);
}

/* Measured compute of every stage of `job` against the plan's prediction for the calls the
 * stage made: sum over calls of the predicted roofline time of its phase (prefill or decode,
 * the plan's microbatch size). *abs_p: the largest |measured / predicted - 1|; *rel_p: the same
 * after dividing out the factor common to all stages (the geometric mean of measured /
 * predicted), which a machine running faster or slower than when the rates were learned
 * shifts, but the split's balance does not. */
static void s_stage_errors(int job, double *abs_p, double *rel_p, char *report, size_t len)
{
    json_t *r = s_json("status %d", job);
    json_t *ps = json_object_get(json_object_get(r, "plan"), "stages");
    json_t *ss = json_object_get(r, "stages");
    double ratio[16], log_sum = 0, worst = 0, rel = 0;
    size_t at = 0, n = json_array_size(ss);
    cr_assert(n == json_array_size(ps) && n >= 1 && n <= 16);
    for (size_t i = 0; i < n; i++) {
        json_t *st = json_object_get(json_array_get(ss, i), "stats"), *p = json_array_get(ps, i);
        cr_assert(json_is_object(st), "job %d stage %zu: no statistics", job, i);
        double pred = s_num(st, "prefill_calls") * s_num(p, "compute_prefill_s") +
                      s_num(st, "decode_calls") * s_num(p, "compute_decode_s");
        double meas = s_num(st, "compute_s");
        cr_assert(pred > 0 && meas > 0);
        ratio[i] = meas / pred;
        log_sum += log(ratio[i]);
        worst = fmax(worst, fabs(ratio[i] - 1.0));
        at += (size_t)snprintf(report + at, at < len ? len - at : 0,
                               "stage %zu (%s, %d layers): predicted %.3f s, measured %.3f s "
                               "(%+.1f%%); ",
                               i, s_str(p, "node"), (int)s_num(p, "n_layers"), pred, meas,
                               100 * (ratio[i] - 1.0));
    }
    for (size_t i = 0; i < n; i++)
        rel = fmax(rel, fabs(ratio[i] / exp(log_sum / (double)n) - 1.0));
    json_decref(r);
    *abs_p = worst;
    *rel_p = rel;
}

/* CPU time: every CPU's busy jiffies (steal included: the hypervisor's share), and the jiffies
 * of the cluster's own processes, to tell how much other work ran during a job. */
typedef struct {
    double busy, ours, t;
} s_cpu_t;

static double s_proc_jiffies(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st);
}

static void s_cpu_mark(s_cpu_t *m)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) != 8)
            memset(v, 0, sizeof(v));
        fclose(f);
    }
    m->busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]); /* all but idle and iowait */
    m->ours = s_proc_jiffies(s_c.coord);
    for (int i = 0; i < s_c.n_nodes; i++)
        if (s_c.node[i] > 0)
            m->ours += s_proc_jiffies(s_c.node[i]);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    m->t = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Cores' worth of other work between two marks. */
static double s_other_cores(const s_cpu_t *a, const s_cpu_t *b)
{
    double hz = (double)sysconf(_SC_CLK_TCK), wall = b->t - a->t;
    return wall > 0 ? ((b->busy - a->busy) - (b->ours - a->ours)) / hz / wall : 0;
}

Test(plan_cluster, slower_daemon_gets_fewer_layers_and_stage_times_match_the_plan)
{
    /* node1 is the same CPU slowed down 2.5x (it idles 1.5x of each forward call and says so
     * in its calibration); one thread each, so the two daemons do not share a core */
    s_cluster(2, "slowdown: 2.5\n");
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 8 --hidden 512 --intermediate 1376 "
                               "--heads 8 --kv-heads 4 --vocab 2048 --seed 3 "
                               "--max-pos 1024"),
                 0);
    s_prompts("p.jsonl", 4, 32);
    s_write("job.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 24\nstop_at_eos: false\nplanner: optimal\n");

    /* the first job runs on the calibration; its stages teach the coordinator the devices'
     * effective rates (and the link the daemons measured) */
    s_cpu_t a, b;
    s_cpu_mark(&a);
    cr_assert_eq(s_submit_wait("job.yaml"), 0, "job 1 failed");
    s_cpu_mark(&b);
    double prev_other = s_other_cores(&a, &b);
    json_t *n = s_json("nodes");
    for (size_t i = 0; i < 2; i++) {
        json_t *d = json_array_get(
            json_object_get(json_array_get(json_object_get(n, "nodes"), i), "devices"), 0);
        cr_assert(json_is_object(json_object_get(d, "learned")), "no learned rates: %s",
                  s_str(json_array_get(json_object_get(n, "nodes"), i), "name"));
        /* a 1-thread daemon says 1 core: the planner splits shared CPUs by what the daemons
         * say, and "2 cores" each on this 2-core machine charged both stages half their rates
         * (the fast node then predicted 2x too slow, issue 8) */
        cr_assert_eq(s_num(d, "cores"), 1, "%s: %g cores",
                     s_str(json_array_get(json_object_get(n, "nodes"), i), "name"),
                     s_num(d, "cores"));
    }
    json_decref(n);

    /* later jobs are planned on what was learned: compare their stages with the prediction.
     * Other engineers' builds on a shared machine change its speed between jobs: each job
     * measures the other work that ran meanwhile, and the absolute comparison counts only for a
     * job that ran on a quiet machine (under 0.15 cores of other work) with rates learned from
     * one that did too; the balance between the stages always counts */
    char report[2048] = "";
    double abs_err = 1, rel_err = 1, best_quiet = -1, other = 0;
    int job = 1;
    for (int attempt = 0; attempt < 4 && !(best_quiet >= 0 && best_quiet <= 0.15); attempt++) {
        s_cpu_mark(&a);
        cr_assert_eq(s_submit_wait("job.yaml"), 0, "job %d failed", job + 1);
        s_cpu_mark(&b);
        job++;
        other = s_other_cores(&a, &b);
        s_stage_errors(job, &abs_err, &rel_err, report, sizeof(report));
        if (other < 0.15 && prev_other < 0.15 && (best_quiet < 0 || abs_err < best_quiet))
            best_quiet = abs_err;
        cr_log_info("job %d (%.2f cores of other work, %.2f while learning): %s", job, other,
                    prev_other, report);
        prev_other = other;
    }
    cr_assert_leq(rel_err, 0.15, "the stages' balance differs from the plan by %.0f%%: %s",
                  100 * rel_err, report);
    if (best_quiet >= 0)
        cr_assert_leq(best_quiet, 0.15,
                      "measured stage compute differs from the plan by %.0f%% on a quiet "
                      "machine: %s",
                      100 * best_quiet, report);
    else
        cr_log_info("other work ran during every job (%.2f cores in the last): measured vs "
                    "predicted stage times not compared (balance only): %s",
                    other, report);

    json_t *r = s_json("status %d", job), *plan = json_object_get(r, "plan");
    cr_assert_str_eq(s_str(r, "state"), "done");
    cr_assert_str_eq(s_str(plan, "planner"), "optimal");
    s_expect_cover(plan, 8);
    json_t *fast = s_stage_on(plan, "node0"), *slow = s_stage_on(plan, "node1");
    cr_assert(fast && slow, "both nodes must run a stage");
    cr_assert_gt(s_num(fast, "n_layers"), s_num(slow, "n_layers"),
                 "the faster node0 got %d layers, the 2.5x slower node1 %d",
                 (int)s_num(fast, "n_layers"), (int)s_num(slow, "n_layers"));
    /* the planner used the learned rates: node1's bandwidth (what bounds decode, so always
     * learned) is well below node0's; compute rates may still be the noisy calibration */
    cr_assert_lt(s_num(slow, "mem_gbps") * 1.5, s_num(fast, "mem_gbps"), "%g vs %g",
                 s_num(slow, "mem_gbps"), s_num(fast, "mem_gbps"));
    /* every stage measured its next-hop link over UCX, and this plan used what job 1 measured */
    json_t *ss = json_object_get(r, "stages");
    for (size_t i = 0; i < json_array_size(ss); i++) {
        json_t *pr = json_object_get(json_object_get(json_array_get(ss, i), "stats"), "probe");
        cr_assert(json_is_object(pr), "stage %zu reported no link probe", i);
        cr_assert_gt(s_num(pr, "gbps"), 0);
        cr_assert(s_num(pr, "latency_s") > 0 && s_num(pr, "latency_s") < 0.01, "latency %g",
                  s_num(pr, "latency_s"));
        cr_assert_lt(s_num(pr, "took_s"), 1.0);
        json_t *link = json_object_get(json_array_get(json_object_get(plan, "stages"), i), "link");
        cr_assert(json_is_true(json_object_get(link, "measured")), "stage %zu link not measured",
                  i);
    }
    json_decref(r);

    /* the table: the plan the job ran with, and measured beside predicted */
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl -c %s status %d", tc_bin(), s_c.ep, job), 0);
    cr_assert(strstr(out, "planner: optimal") && strstr(out, "bottleneck:") &&
                  strstr(out, "stage compute pred") && strstr(out, "predicted: prefill") &&
                  strstr(out, " GB/s, "), /* a stage's measured link, from its DONE stats */
              "%s", out);
    free(out);
    s_passed = 1;
}

Test(plan_cluster, even_planner_splits_evenly_and_is_predicted_slower)
{
    s_cluster(2, "slowdown: 3\n");
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 8 --hidden 128 --intermediate 344 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 7"),
                 0);
    s_prompts("p.jsonl", 4, 8);
    s_write("opt.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 4\nplanner: optimal\n");
    s_write("even.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 4\nplanner: even\n");
    json_t *opt = s_json("plan %s/opt.yaml", s_c.dir), *even = s_json("plan %s/even.yaml", s_c.dir);
    json_t *po = json_object_get(opt, "plan"), *pe = json_object_get(even, "plan");
    s_expect_cover(pe, 8);
    cr_assert_str_eq(s_str(pe, "planner"), "even");
    for (size_t i = 0; i < 2; i++)
        cr_expect_eq(s_num(json_array_get(json_object_get(pe, "stages"), i), "n_layers"), 4);
    /* the optimal plan is predicted no slower than the even one, and says so */
    cr_expect_leq(s_num(po, "job_time_s"), s_num(pe, "job_time_s") * 1.0001);
    cr_expect_geq(s_num(json_object_get(po, "baselines"), "speedup_even"), 0.9999);
    /* an even job runs and gives the same tokens as the optimal one */
    char *a, *b;
    cr_assert_eq(tc_sh(&a, "%s/pipectl -c %s submit %s/opt.yaml --wait 2>/dev/null", tc_bin(),
                       s_c.ep, s_c.dir),
                 0);
    cr_assert_eq(tc_sh(&b, "%s/pipectl -c %s submit %s/even.yaml --wait 2>/dev/null", tc_bin(),
                       s_c.ep, s_c.dir),
                 0);
    cr_expect_str_eq(a, b);
    json_t *st = s_json("status 2");
    cr_expect_str_eq(s_str(json_object_get(st, "plan"), "planner"), "even");
    json_decref(st);
    free(a), free(b);
    json_decref(opt);
    json_decref(even);
    s_passed = 1;
}

Test(plan_cluster, pipectl_plan_on_the_live_cluster)
{
    s_cluster(2, NULL);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 6 --hidden 128 --intermediate 344 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 7"),
                 0);
    s_prompts("p.jsonl", 5, 6);
    s_write("job.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 8\nplanner: optimal\n");
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl -c %s plan %s/job.yaml", tc_bin(), s_c.ep, s_c.dir), 0);
    const char *want[] = {"plan: 2 stages",
                          "node0",
                          "node1",
                          "layers",
                          "memory GiB",
                          "link to next",
                          "bottleneck:",
                          "prefill:",
                          "decode:",
                          "tokens/s",
                          "bubble",
                          "over an even split",
                          "fastest single device"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        cr_expect(strstr(out, want[i]), "'%s' not in: %s", want[i], out);
    free(out);

    json_t *r = s_json("plan %s/job.yaml", s_c.dir), *p = json_object_get(r, "plan");
    s_expect_cover(p, 6);
    const char *keys[] = {"decode_tok_s", "prefill_tok_s", "bubble_decode", "bubble_prefill",
                          "job_time_s",   "microbatches",  "resident_seqs"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        cr_expect(json_is_number(json_object_get(p, keys[i])), "no %s", keys[i]);
    cr_expect_eq(s_num(p, "resident_seqs"), 5);
    cr_expect_geq(s_num(p, "microbatches"), 2, "fewer microbatches than stages");
    json_t *s0 = json_array_get(json_object_get(p, "stages"), 0);
    const char *skeys[] = {"prefill_s",        "decode_s", "compute_prefill_s",
                           "compute_decode_s", "mem_used", "mem_avail",
                           "gflops",           "mem_gbps"};
    for (size_t i = 0; i < sizeof(skeys) / sizeof(skeys[0]); i++)
        cr_expect_gt(s_num(s0, skeys[i]), 0, "stage 0: %s", skeys[i]);
    cr_expect_str_eq(s_str(s0, "device_id"), "cpu:0");
    cr_expect(json_is_object(json_object_get(s0, "link")));
    cr_expect(json_is_number(json_object_get(json_object_get(p, "baselines"), "speedup_even")));
    json_decref(r);

    /* --stages and the auto planner */
    r = s_json("plan %s/job.yaml --stages 1", s_c.dir);
    cr_expect_eq(json_array_size(json_object_get(json_object_get(r, "plan"), "stages")), 1);
    json_decref(r);
    s_write("auto.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 8\nplanner: auto\n");
    r = s_json("plan %s/auto.yaml", s_c.dir);
    p = json_object_get(r, "plan");
    cr_expect_str_eq(s_str(p, "planner"), "auto");
    cr_expect_leq(json_array_size(json_object_get(p, "stages")), 2);
    /* auto may leave devices out, so it is never predicted slower than one device alone */
    cr_expect_geq(s_num(json_object_get(p, "baselines"), "speedup_single"), 0.9999);
    json_decref(r);
    /* planning submitted nothing */
    cr_expect_neq(tc_sh(NULL, "%s/pipectl -c %s status 1 2>/dev/null", tc_bin(), s_c.ep), 0);
    /* a bad job is refused with the reason */
    s_write("bad.yaml", "model: nothere\nprompts: p.jsonl\n");
    cr_expect_neq(tc_sh(&out, "%s/pipectl -c %s plan %s/bad.yaml 2>&1", tc_bin(), s_c.ep, s_c.dir),
                  0);
    cr_expect(strstr(out, "nothere"), "%s", out);
    free(out);
    s_passed = 1;
}

Test(plan_cluster, lost_node_is_left_out_and_a_joining_node_taken_back)
{
    s_cluster(3, NULL);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 6 --hidden 128 --intermediate 344 "
                               "--heads 4 --kv-heads 2 --vocab 256 --seed 7"),
                 0);
    s_prompts("p.jsonl", 3, 5);
    s_write("job.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 6\nplanner: optimal\n");
    json_t *r = s_json("plan %s/job.yaml", s_c.dir);
    cr_assert_eq(json_array_size(json_object_get(json_object_get(r, "plan"), "stages")), 3);
    json_decref(r);

    kill(s_c.node[1], SIGKILL);
    waitpid(s_c.node[1], NULL, 0);
    s_c.node[1] = -1;
    bool lost = false;
    for (int i = 0; i < 100 && !lost; i++, usleep(100 * 1000)) {
        char *o;
        tc_sh(&o, "%s/pipectl -c %s -o json health node1 2>/dev/null", tc_bin(), s_c.ep);
        lost = strstr(o, "\"state\": \"lost\"") != NULL;
        free(o);
    }
    cr_assert(lost, "node1 was not declared lost");

    /* the next job is planned on the two survivors only and runs */
    r = s_json("plan %s/job.yaml", s_c.dir);
    json_t *p = json_object_get(r, "plan");
    cr_expect_eq(json_array_size(json_object_get(p, "stages")), 2);
    cr_expect_null(s_stage_on(p, "node1"), "the plan uses the lost node");
    s_expect_cover(p, 6);
    json_decref(r);
    char *ref, *got;
    cr_assert_eq(
        tc_sh(&ref, "%s/pl-generate --microbatches 1 %s/job.yaml 2>/dev/null", tc_bin(), s_c.dir),
        0);
    cr_assert_eq(tc_sh(&got, "%s/pipectl -c %s submit %s/job.yaml --wait 2>/dev/null", tc_bin(),
                       s_c.ep, s_c.dir),
                 0);
    cr_expect_str_eq(got, ref);
    free(ref), free(got);
    r = s_json("status 1");
    cr_expect_null(s_stage_on(json_object_get(r, "plan"), "node1"));
    cr_expect_eq(json_array_size(json_object_get(json_object_get(r, "plan"), "stages")), 2);
    json_decref(r);

    /* node1 comes back: plans take it again */
    s_node("node1", "");
    cr_assert_eq(tc_wait_idle(&s_c, 3, 60), 0, "node1 did not come back");
    r = s_json("plan %s/job.yaml", s_c.dir);
    cr_expect_not_null(s_stage_on(json_object_get(r, "plan"), "node1"));
    json_decref(r);
    s_passed = 1;
}

/* MemAvailable in MiB, as the CPU backend reports device memory. */
static long s_mem_available_mb(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "MemAvailable: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb / 1024;
}

Test(plan_cluster, a_kv_cache_that_does_not_fit_every_sequence_is_refused_with_the_limit)
{
    /* leave the daemon about 1.5 GiB: each sequence of the job below needs about 12 MiB of KV
     * cache (6 layers x 2 x 64 x 4 bytes x 4001 positions), 256 of them do not fit */
    long avail = s_mem_available_mb();
    cr_assert_gt(avail, 4096, "too little memory for this test");
    memset(&s_c, 0, sizeof(s_c));
    tc_mkdtemp(s_c.dir, sizeof(s_c.dir));
    snprintf(s_c.ep, sizeof(s_c.ep), "tcp://127.0.0.1:%d", tc_free_port());
    tc_start_coord(&s_c, s_c.ep);
    char extra[64];
    snprintf(extra, sizeof(extra), "memory_reserve_mb: %ld\n", avail - 1536);
    s_node("node0", extra);
    cr_assert_eq(tc_wait_idle(&s_c, 1, 60), 0);
    cr_assert_eq(tc_make_model(s_c.dir, "m",
                               "--layers 6 --hidden 128 --intermediate 344 --heads 4 --kv-heads 2 "
                               "--vocab 256 --seed 7 --max-pos 4096"),
                 0);
    s_prompts("p.jsonl", 256, 1);
    s_write("job.yaml", "model: m\nprompts: p.jsonl\nmax_new_tokens: 4000\nplanner: optimal\n");
    char *out;
    cr_assert_eq(tc_sh(&out, "%s/pipectl -c %s plan %s/job.yaml", tc_bin(), s_c.ep, s_c.dir), 0,
                 "%s", out);
    cr_expect(strstr(out, "note: KV cache for 256 sequences does not fit; at most "), "%s", out);
    free(out);
    cr_expect_neq(tc_sh(NULL, "%s/pipectl -c %s submit %s/job.yaml --wait >/dev/null 2>%s/err",
                        tc_bin(), s_c.ep, s_c.dir, s_c.dir),
                  0);
    json_t *r = s_json("status 1");
    cr_expect_str_eq(s_str(r, "state"), "failed");
    const char *note = s_str(r, "note");
    int fit = -1;
    cr_expect(sscanf(strstr(note, "at most ") ? strstr(note, "at most ") : "", "at most %d fit",
                     &fit) == 1 &&
                  fit > 0 && fit < 256 && strstr(note, "split the prompts into several jobs"),
              "%s", note);
    json_decref(r);
    /* the node is free for the next job */
    cr_assert_eq(tc_wait_idle(&s_c, 1, 10), 0);
    s_passed = 1;
}
