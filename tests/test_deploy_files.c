/* The deployment files of etc/systemd and etc/slurm, checked by the tools that run them:
 * systemd-analyze verify and security on the units, bash on the Slurm script (with fake srun
 * and scontrol), and the cluster file it writes read by the project's own loader. */
#include "cluster_util.h"
#include "common/config.h"
#include "common/util.h"

#include <criterion/criterion.h>

static char s_dir[256];

static void s_setup(void)
{
    tc_mkdtemp(s_dir, sizeof(s_dir));
}

static void s_teardown(void)
{
    tc_sh(NULL, "rm -rf '%s'", s_dir);
}

TestSuite(deploy, .init = s_setup, .fini = s_teardown);

static char *s_read(const char *path)
{
    char *text = NULL;
    cr_assert_eq(tc_sh(&text, "cat '%s'", path), 0, "cannot read %s", path);
    return text;
}

/* The values of `key` in the [Service] section, space-joined ("" when absent); -1 when the
 * key is missing. */
static int s_unit_get(const char *unit, const char *key, char *out, size_t cap)
{
    int found = -1, in_service = 0;
    size_t klen = strlen(key);
    out[0] = 0;
    for (const char *l = unit; *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n && l[0] == '[')
            in_service = n == 9 && memcmp(l, "[Service]", 9) == 0;
        else if (in_service && n > klen && memcmp(l, key, klen) == 0 && l[klen] == '=') {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "%s%.*s", used ? " " : "", (int)(n - klen - 1),
                     l + klen + 1);
            found = 0;
        }
        l += n + (e != NULL);
    }
    return found;
}

static void s_want(const char *unit, const char *name, const char *key, const char *value)
{
    char v[1024];
    cr_assert_eq(s_unit_get(unit, key, v, sizeof(v)), 0, "%s: no %s=", name, key);
    cr_assert_str_eq(v, value, "%s: %s=%s, expected %s", name, key, v, value);
}

static void s_want_word(const char *unit, const char *name, const char *key, const char *word)
{
    char v[1024], w[128];
    cr_assert_eq(s_unit_get(unit, key, v, sizeof(v)), 0, "%s: no %s=", name, key);
    snprintf(w, sizeof(w), " %s ", word);
    char padded[1100];
    snprintf(padded, sizeof(padded), " %s ", v);
    cr_assert(strstr(padded, w), "%s: %s= lacks %s (%s)", name, key, word, v);
}

/* A copy of the unit whose ExecStart names the build tree's binaries (verify checks they
 * exist and are executable), with `from` replaced by `to` when given; its path in `path`. */
static void s_unit_copy(const char *name, const char *from, const char *to, char *path, size_t cap)
{
    char subst[256] = "";
    if (from)
        snprintf(subst, sizeof(subst), "-e 's|%s|%s|'", from, to);
    snprintf(path, cap, "%s/%s", s_dir, name);
    cr_assert_eq(tc_sh(NULL, "sed -e 's|/usr/local/bin/|%s/|' %s '%s/etc/systemd/%s' > '%s'",
                       tc_bin(), subst, PL_SOURCE_DIR, name, path),
                 0);
}

static int s_have(const char *tool)
{
    return tc_sh(NULL, "command -v %s >/dev/null 2>&1", tool) == 0;
}

/* verify prints a warning and still exits 0 on an unknown key or a bad value: any output is
 * a failure. */
static void s_verify(const char *path, int want_clean)
{
    char *out = NULL;
    int rc = tc_sh(&out, "cd '%s' && systemd-analyze verify '%s' 2>&1", s_dir, path);
    if (want_clean)
        cr_assert(rc == 0 && out[0] == 0, "systemd-analyze verify %s (rc %d):\n%s", path, rc, out);
    else
        cr_assert(rc != 0 || out[0] != 0, "verify accepted a broken unit %s", path);
    free(out);
}

Test(deploy, systemd_units_verify)
{
    if (!s_have("systemd-analyze"))
        cr_skip_test("systemd-analyze is not installed (Debian package systemd)");
    char path[512];
    s_unit_copy("pipecoord.service", NULL, NULL, path, sizeof(path));
    s_verify(path, 1);
    s_unit_copy("pipeld.service", NULL, NULL, path, sizeof(path));
    s_verify(path, 1);
}

/* The check can fail: a misspelt key, a bad value and a missing binary are each caught. */
Test(deploy, systemd_verify_catches_mistakes)
{
    if (!s_have("systemd-analyze"))
        cr_skip_test("systemd-analyze is not installed (Debian package systemd)");
    char path[512];
    s_unit_copy("pipeld.service", "PrivateTmp=", "PrivatTmp=", path, sizeof(path));
    s_verify(path, 0);
    s_unit_copy("pipeld.service", "ProtectHome=yes", "ProtectHome=yess", path, sizeof(path));
    s_verify(path, 0);
    s_unit_copy("pipecoord.service", "bin/pipecoord", "bin/no-such-binary", path, sizeof(path));
    s_verify(path, 0);
}

/* systemd's own exposure score (0 best, 10 worst) stays low: the coordinator's is at most 1.5,
 * the daemon's (GPUs, shared memory, netlink) at most 2.5. */
Test(deploy, systemd_exposure_scores)
{
    if (!s_have("systemd-analyze"))
        cr_skip_test("systemd-analyze is not installed (Debian package systemd)");
    char path[512];
    s_unit_copy("pipecoord.service", NULL, NULL, path, sizeof(path));
    cr_assert_eq(tc_sh(NULL,
                       "systemd-analyze security --offline=yes --threshold=15 '%s' "
                       ">/dev/null 2>&1",
                       path),
                 0, "pipecoord.service exposure above 1.5");
    s_unit_copy("pipeld.service", NULL, NULL, path, sizeof(path));
    cr_assert_eq(tc_sh(NULL,
                       "systemd-analyze security --offline=yes --threshold=25 '%s' "
                       ">/dev/null 2>&1",
                       path),
                 0, "pipeld.service exposure above 2.5");
}

/* What the units must say, whatever systemd accepts. */
Test(deploy, systemd_hardening_options)
{
    static const char *const names[] = {"pipecoord.service", "pipeld.service"};
    char path[512], v[1024];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/etc/systemd/%s", PL_SOURCE_DIR, names[i]);
        char *u = s_read(path);
        s_want(u, names[i], "User", "pipeld");
        s_want(u, names[i], "NoNewPrivileges", "yes");
        s_want(u, names[i], "ProtectSystem", "strict");
        s_want(u, names[i], "ProtectHome", "yes");
        s_want(u, names[i], "PrivateTmp", "yes");
        s_want(u, names[i], "CapabilityBoundingSet", "");
        s_want_word(u, names[i], "SystemCallFilter", "@system-service");
        s_want_word(u, names[i], "SystemCallFilter", "~@privileged");
        s_want_word(u, names[i], "RestrictAddressFamilies", "AF_INET");
        s_want_word(u, names[i], "RestrictAddressFamilies", "AF_INET6");
        s_want_word(u, names[i], "RestrictAddressFamilies", "AF_UNIX");
        s_want_word(u, names[i], "ExecStart", "--log-target");
        free(u);
    }
    snprintf(path, sizeof(path), "%s/etc/systemd/pipecoord.service", PL_SOURCE_DIR);
    char *u = s_read(path);
    s_want(u, "pipecoord.service", "StateDirectory", "pipecoord");
    s_want(u, "pipecoord.service", "WorkingDirectory", "/var/lib/pipecoord");
    free(u);
    snprintf(path, sizeof(path), "%s/etc/systemd/pipeld.service", PL_SOURCE_DIR);
    u = s_read(path);
    static const char *const devices[] = {"char-nvidia*", "char-drm", "char-kfd"};
    for (size_t i = 0; i < PL_ARRAY_SIZE(devices); i++)
        s_want_word(u, "pipeld.service", "DeviceAllow", devices[i]);
    s_want(u, "pipeld.service", "DevicePolicy", "closed");
    s_want_word(u, "pipeld.service", "RestrictAddressFamilies", "AF_NETLINK");
    s_want_word(u, "pipeld.service", "ReadWritePaths", "/dev/shm");
    /* UCX's shared memory between processes on one host, and the GPUs themselves */
    cr_assert_neq(s_unit_get(u, "PrivateIPC", v, sizeof(v)), 0, "pipeld.service: PrivateIPC");
    cr_assert_neq(s_unit_get(u, "RemoveIPC", v, sizeof(v)), 0, "pipeld.service: RemoveIPC");
    cr_assert_neq(s_unit_get(u, "PrivateDevices", v, sizeof(v)), 0, "pipeld: PrivateDevices");
    free(u);
}

/* ---- Slurm ---- */

#define S_SBATCH PL_SOURCE_DIR "/etc/slurm/pipeld.sbatch"

/* Fake scontrol (prints $FAKE_HOSTS one per line when asked for SLURM_JOB_NODELIST's hosts)
 * and srun (records its arguments, one call per line), first in PATH. */
static void s_fake_slurm(void)
{
    char path[512];
    cr_assert_eq(tc_sh(NULL, "mkdir -p '%s/bin'", s_dir), 0);
    snprintf(path, sizeof(path), "%s/bin/scontrol", s_dir);
    tc_write(path, "#!/bin/sh\n"
                   "[ \"$1 $2\" = 'show hostnames' ] && [ \"$3\" = \"$SLURM_JOB_NODELIST\" ] ||"
                   " { echo \"fake scontrol: $*\" >&2; exit 1; }\n"
                   "printf '%s\\n' $FAKE_HOSTS\n");
    snprintf(path, sizeof(path), "%s/bin/srun", s_dir);
    /* like real steps, the daemons' step lasts while the coordinator's runs: it ends only once
     * the coordinator's step has started (the script kills that one when the daemons end) */
    tc_write(path, "#!/bin/sh\necho \"srun $*\" >> \"$FAKE_SRUN_LOG\"\n"
                   "case \"$*\" in *--nodelist=*) exit 0 ;; esac\n"
                   "for i in $(seq 100); do\n"
                   "  grep -q -- --nodelist= \"$FAKE_SRUN_LOG\" && exit 0; sleep 0.05\n"
                   "done\n");
    cr_assert_eq(tc_sh(NULL, "chmod +x '%s/bin/scontrol' '%s/bin/srun'", s_dir, s_dir), 0);
}

static int s_sbatch(char **out, const char *hosts, const char *extra)
{
    return tc_sh(out,
                 "cd '%s' && env -i PATH='%s/bin':/usr/bin:/bin HOME='%s' SLURM_JOB_ID=4242 "
                 "SLURM_JOB_NODELIST='gpu[01-03]' SLURM_SUBMIT_DIR='%s' SLURM_CPUS_ON_NODE=16 "
                 "FAKE_HOSTS='%s' FAKE_SRUN_LOG='%s/srun.log' PIPELD_BIN=/opt/pl %s "
                 "bash '%s' 2>&1",
                 s_dir, s_dir, s_dir, s_dir, hosts, s_dir, extra, S_SBATCH);
}

Test(deploy, slurm_script_parses)
{
    char *out = NULL;
    cr_assert_eq(tc_sh(&out, "bash -n '%s' 2>&1", S_SBATCH), 0, "%s", out);
    free(out);
    cr_assert_eq(tc_sh(&out, "grep -c '^#SBATCH' '%s'", S_SBATCH), 0);
    cr_assert_gt(atoi(out), 2);
    free(out);
}

Test(deploy, slurm_writes_the_cluster_file_and_starts_the_steps)
{
    s_fake_slurm();
    char *out = NULL;
    int rc = s_sbatch(&out, "gpu01 gpu02 gpu03", "PIPELD_PORT=6000 PIPELD_HTTP_PORT=9100");
    cr_assert_eq(rc, 0, "%s", out);
    free(out);

    static pl_cfg_cluster_t cl;
    char path[512];
    snprintf(path, sizeof(path), "%s/pipeld-cluster-4242.yaml", s_dir);
    cr_assert_eq(pl_cfg_cluster_load(path, &cl), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(cl.endpoint, "tcp://gpu01:6000");
    cr_assert_eq(cl.http.port, 9100);
    cr_assert_eq(cl.n_nodes, 3);
    static const char *const want[] = {"gpu01", "gpu02", "gpu03"};
    for (int i = 0; i < 3; i++) {
        cr_assert_str_eq(cl.nodes[i].name, want[i]);
        cr_assert_str_eq(cl.nodes[i].address, want[i]);
        cr_assert_eq(cl.nodes[i].threads, 16);
    }

    char *log = NULL;
    cr_assert_eq(tc_sh(&log, "cat '%s/srun.log'", s_dir), 0);
    const char *coord = strstr(log, "--nodelist=gpu01");
    cr_assert(coord && strstr(log, "/opt/pl/pipecoord --cluster ") &&
                  strstr(log, "--endpoint tcp://0.0.0.0:6000"),
              "no coordinator step on the first node:\n%s", log);
    const char *daemons = strstr(log, "--nodes=3 --ntasks-per-node=1");
    cr_assert(daemons && strstr(daemons, "/opt/pl/pipeld") && strstr(daemons, path) &&
                  strstr(daemons, "--http 0.0.0.0:9101"),
              "no daemon step on every node:\n%s", log);
    cr_assert_eq(tc_sh(NULL, "test $(wc -l < '%s/srun.log') -eq 2", s_dir), 0, "%s", log);
    free(log);
}

Test(deploy, slurm_refuses_bad_input_and_writes_nothing)
{
    s_fake_slurm();
    char *out = NULL;
    cr_assert_neq(s_sbatch(&out, "gpu01 bad:name", ""), 0);
    cr_assert(strstr(out, "host name 'bad:name' is not a valid node name"), "%s", out);
    free(out);
    cr_assert_neq(s_sbatch(&out, "gpu01", "PIPELD_PORT=55x"), 0);
    cr_assert(strstr(out, "PIPELD_PORT '55x' is not a port"), "%s", out);
    free(out);
    cr_assert_neq(tc_sh(&out, "env -i PATH=/usr/bin:/bin bash '%s' 2>&1", S_SBATCH), 0);
    cr_assert(strstr(out, "not inside a Slurm job"), "%s", out);
    free(out);
    cr_assert_neq(tc_sh(NULL, "ls '%s'/pipeld-cluster-* >/dev/null 2>&1", s_dir), 0,
                  "a refused run left a cluster file");
    cr_assert_neq(tc_sh(NULL, "test -e '%s/srun.log'", s_dir), 0, "a refused run started srun");
}

/* PIPELD_CLUSTER_ONLY=1 stops after the file: for writing one outside an allocation's steps. */
Test(deploy, slurm_cluster_only)
{
    s_fake_slurm();
    char *out = NULL;
    cr_assert_eq(s_sbatch(&out, "n1", "PIPELD_CLUSTER_ONLY=1 PIPELD_LOG_FORMAT=json"), 0, "%s",
                 out);
    free(out);
    static pl_cfg_cluster_t cl;
    char path[512];
    snprintf(path, sizeof(path), "%s/pipeld-cluster-4242.yaml", s_dir);
    cr_assert_eq(pl_cfg_cluster_load(path, &cl), PL_OK, "%s", pl_error_msg());
    cr_assert_str_eq(cl.log_format, "json");
    cr_assert_eq(cl.http.port, 0);
    cr_assert_neq(tc_sh(NULL, "test -e '%s/srun.log'", s_dir), 0);
}
