/* Tests of the backend registry (CPU always present, plugins found or explained) and of the CPU
 * device's probe, open and calibration. */
#include "backends/backend.h"
#include "backends/backend_impl.h" /* to check the tables behind the handles */

#include "common/util.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(registry, cpu_always_present)
{
    pl_be_entry_t e[8];
    int n = pl_be_registry_list(e, 8);
    cr_assert(n == 3, "cpu, cuda, hip: got %d entries", n);
    cr_expect(strcmp(e[0].name, "cpu") == 0 && e[0].backend == pl_be_cpu());
    cr_expect(e[0].why[0] == '\0');
    cr_expect(pl_be_registry_find("cpu") == pl_be_cpu());
    cr_expect_str_eq(pl_be_name(pl_be_cpu()), "cpu");
    cr_expect(pl_be_cpu()->ops == pl_be_cpu_ops());
    cr_expect(pl_be_cpu_ops()->abi_version == PL_BE_ABI_VERSION);
    cr_expect(pl_be_registry_list(e, 1) == 1);
    cr_expect(pl_be_registry_list(e, 0) == 0);
}

/* Without a GPU, the plugins are either absent or find no device; either way the entry says
 * why. On a machine with a GPU the plugin must be complete. */
Test(registry, plugins_loaded_or_explained)
{
    pl_be_entry_t e[3];
    cr_assert(pl_be_registry_list(e, 3) == 3);
    for (int i = 1; i < 3; i++) {
        cr_expect(strcmp(e[i].name, i == 1 ? "cuda" : "hip") == 0, "entry %d: %s", i, e[i].name);
        if (e[i].backend) {
            cr_expect(e[i].backend->ops->abi_version == PL_BE_ABI_VERSION);
            cr_expect(strcmp(pl_be_name(e[i].backend), e[i].name) == 0);
            cr_expect(pl_be_registry_find(e[i].name) == e[i].backend);
        } else {
            cr_expect(e[i].why[0] != '\0', "%s unavailable without a reason", e[i].name);
            cr_expect(strstr(e[i].why, "libpipeld_be_") != NULL, "why: %s", e[i].why);
            cr_expect(pl_be_registry_find(e[i].name) == NULL);
            cr_expect(strstr(pl_error_msg(), e[i].name) != NULL, "%s", pl_error_msg());
        }
    }
}

Test(registry, missing_plugin_names_directories)
{
    char dir[] = "/tmp/pl_reg_XXXXXX";
    pl_be_entry_t e[3];
    cr_assert(mkdtemp(dir));
    setenv("PIPELD_PLUGIN_DIR", dir, 1);
    cr_assert(pl_be_registry_list(e, 3) == 3);
    /* the override directory is searched first and named in the reason when nothing is found */
    for (int i = 1; i < 3; i++)
        if (!e[i].backend && strstr(e[i].why, "not found"))
            cr_expect(strstr(e[i].why, dir) != NULL, "why: %s", e[i].why);
    rmdir(dir);
}

Test(registry, broken_plugin_reports_dlerror)
{
    char dir[] = "/tmp/pl_reg_XXXXXX", path[64];
    pl_be_entry_t e[3];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/libpipeld_be_cuda.so", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("not an ELF file\n", f);
    fclose(f);
    setenv("PIPELD_PLUGIN_DIR", dir, 1);
    cr_assert(pl_be_registry_list(e, 3) == 3);
    cr_expect(e[1].backend == NULL);
    cr_expect(strstr(e[1].why, path) != NULL, "why: %s", e[1].why);
    cr_expect(pl_be_registry_find("cuda") == NULL);
    cr_expect(strstr(pl_error_msg(), "unavailable") != NULL, "%s", pl_error_msg());
    unlink(path);
    rmdir(dir);
}

/* A plugin keeps its error message in its own copy of pl_common: the handle wrappers must bring
 * it over when a call fails, and reach every slot of its table (the sequence-free slot, health).
 * The fake plugin is compiled here with the system compiler. */
Test(registry, plugin_errors_reach_the_host)
{
    char dir[] = "/tmp/pl_reg_XXXXXX", src[64], lib[64];
    pl_be_entry_t e[3];
    cr_assert(mkdtemp(dir));
    snprintf(src, sizeof(src), "%s/fake.c", dir);
    snprintf(lib, sizeof(lib), "%s/libpipeld_be_cuda.so", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fprintf(f,
            "#include \"backends/backend_impl.h\"\n#include <stdio.h>\n#include <string.h>\n"
            "static char msg[64];\n"
            "int fake_freed = -1;\n"
            "const char *pl_error_msg(void) { return msg; }\n"
            "static pl_status_t probe(pl_be_device_info_t *i, int m, int *n)\n"
            "{ memset(i, 0, sizeof(*i)); strcpy(i->backend, \"cuda\"); *n = 1; return PL_OK; }\n"
            "static pl_status_t op(int a, int b, void **d) { *d = msg; return PL_OK; }\n"
            "static void cl(void *d) {}\n"
            "static pl_status_t load(void *d, pl_model_t *m, const pl_be_stage_params_t *p,\n"
            "  void **s) { snprintf(msg, sizeof(msg), \"fake: out of device memory\");\n"
            "  return PL_ERR_NOMEM; }\n"
            "static pl_status_t ld2(void *d, pl_model_t *m, const pl_be_stage_params_t *p,\n"
            "  void **s) { *s = msg; return PL_OK; }\n"
            "static pl_status_t cal(void *d, pl_be_calib_t *c)\n"
            "{ c->gflops = 80; c->mem_gbps = 40; return PL_OK; }\n"
            "static pl_status_t fwd(void *s, const pl_be_batch_t *b, const void *i, void *o)\n"
            "{ snprintf(msg, sizeof(msg), \"fake: kernel fault\"); return PL_ERR_BACKEND; }\n"
            "static void fre(void *s, int slot) { fake_freed = slot; }\n"
            "static void unl(void *s) {}\n"
            "static pl_status_t hl(int i, json_t **o)\n"
            "{ snprintf(msg, sizeof(msg), \"fake: no management library\");\n"
            "  return PL_ERR_UNSUPPORTED; }\n"
            "static pl_be_ops_t ops = {PL_BE_ABI_VERSION, \"cuda\", probe, op, cl, cal,\n"
            "  load, fwd, fre, unl, hl};\n"
            "void fake_load_ok(void) { ops.stage_load = ld2; }\n"
            "const pl_be_ops_t *pl_be_plugin_ops(void) { return &ops; }\n");
    fclose(f);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -I%s -o %s %s", PL_SOURCE_DIR, lib, src);
    if (system(cmd) != 0)
        cr_skip_test("no C compiler to build the fake plugin");
    setenv("PIPELD_PLUGIN_DIR", dir, 1);
    cr_assert(pl_be_registry_list(e, 3) == 3);
    const pl_be_t *be = pl_be_registry_find("cuda");
    cr_assert_not_null(be, "fake plugin not loaded: %s", e[1].why);
    pl_be_device_t *dev = NULL;
    pl_be_stage_t *stage = NULL;
    cr_assert_eq(pl_be_device_open(be, 0, 0, &dev), PL_OK);
    cr_assert_eq(pl_be_device_backend(dev), be);
    pl_error_clear();
    cr_assert_eq(pl_be_stage_load(dev, NULL, NULL, &stage), PL_ERR_NOMEM);
    cr_assert_str_eq(pl_error_msg(), "fake: out of device memory");
    cr_assert_null(stage);
    json_t *h = NULL;
    cr_assert_eq(pl_be_device_health(dev, &h), PL_ERR_UNSUPPORTED);
    cr_assert_str_eq(pl_error_msg(), "fake: no management library");
    cr_assert_null(h);

    /* the same library, reached directly: let loads succeed, watch the free slot */
    void *lib_h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(lib_h, "the registry keeps the plugin loaded");
    void (*load_ok)(void) = (void (*)(void))dlsym(lib_h, "fake_load_ok");
    int *freed = dlsym(lib_h, "fake_freed");
    cr_assert(load_ok && freed);
    load_ok();
    cr_assert_eq(pl_be_stage_load(dev, NULL, NULL, &stage), PL_OK);
    pl_be_batch_t b = {0};
    pl_error_clear();
    cr_assert_eq(pl_be_stage_forward(stage, &b, NULL, NULL), PL_ERR_BACKEND);
    cr_assert_str_eq(pl_error_msg(), "fake: kernel fault");
    pl_be_stage_free_seq(stage, 5);
    cr_expect_eq(*freed, 5, "the sequence-free slot was not called");
    pl_be_calib_t c;
    pl_be_device_set_slowdown(dev, 4.0);
    cr_assert_eq(pl_be_device_calibrate(dev, &c), PL_OK);
    cr_expect_float_eq(c.gflops, 20.0, 1e-9, "a slowed-down device reports slowed rates");
    cr_expect_float_eq(c.mem_gbps, 10.0, 1e-9);
    pl_be_stage_unload(&stage);
    cr_expect_null(stage);
    pl_be_device_close(&dev);
    cr_expect_null(dev);
    dlclose(lib_h);
    unlink(src);
    unlink(lib);
    rmdir(dir);
}

/* A plugin whose probe fails: its reason, kept in the plugin's own pl_common, reaches the entry
 * through the same relay as every other call, and the backend is not offered. */
Test(registry, plugin_probe_reason_reaches_the_entry)
{
    char dir[] = "/tmp/pl_reg_XXXXXX", src[64], lib[64];
    pl_be_entry_t e[3];
    cr_assert(mkdtemp(dir));
    snprintf(src, sizeof(src), "%s/fake.c", dir);
    snprintf(lib, sizeof(lib), "%s/libpipeld_be_cuda.so", dir);
    FILE *f = fopen(src, "w");
    cr_assert(f);
    fprintf(f,
            "#include \"backends/backend_impl.h\"\n#include <stdio.h>\n"
            "static char msg[64];\n"
            "const char *pl_error_msg(void) { return msg; }\n"
            "static pl_status_t probe(pl_be_device_info_t *i, int m, int *n)\n"
            "{ snprintf(msg, sizeof(msg), \"fake: driver too old\"); return PL_ERR_NO_DEVICE; }\n"
            "static pl_status_t op(int a, int b, void **d) { return PL_ERR_NO_DEVICE; }\n"
            "static void cl(void *d) {}\n"
            "static pl_status_t cal(void *d, pl_be_calib_t *c) { return PL_OK; }\n"
            "static pl_status_t ld(void *d, pl_model_t *m, const pl_be_stage_params_t *p,\n"
            "  void **s) { return PL_ERR_NO_DEVICE; }\n"
            "static pl_status_t fwd(void *s, const pl_be_batch_t *b, const void *i, void *o)\n"
            "{ return PL_ERR_BACKEND; }\n"
            "static void unl(void *s) {}\n"
            "static pl_be_ops_t ops = {PL_BE_ABI_VERSION, \"cuda\", probe, op, cl, cal,\n"
            "  ld, fwd, NULL, unl, NULL};\n"
            "const pl_be_ops_t *pl_be_plugin_ops(void) { return &ops; }\n");
    fclose(f);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cc -shared -fPIC -I%s -o %s %s", PL_SOURCE_DIR, lib, src);
    if (system(cmd) != 0)
        cr_skip_test("no C compiler to build the fake plugin");
    setenv("PIPELD_PLUGIN_DIR", dir, 1);
    pl_error(PL_ERR_INVALID, "a stale message of this thread");
    cr_assert(pl_be_registry_list(e, 3) == 3);
    cr_assert_str_eq(e[1].name, "cuda");
    cr_assert_null(e[1].backend);
    cr_expect(strstr(e[1].why, lib) != NULL, "why: %s", e[1].why);
    cr_expect(strstr(e[1].why, ": fake: driver too old") != NULL, "why: %s", e[1].why);
    cr_expect_null(pl_be_registry_find("cuda"));
    unlink(src);
    unlink(lib);
    rmdir(dir);
}

Test(registry, unknown_backend)
{
    cr_expect(pl_be_registry_find("tpu") == NULL);
    cr_expect(strstr(pl_error_msg(), "tpu") != NULL);
    cr_expect(pl_be_registry_find(NULL) == NULL);
}

Test(cpu_device, probe_open_calibrate)
{
    const pl_be_t *cpu = pl_be_cpu();
    pl_be_device_info_t info[2];
    int n = 0;
    pl_be_device_t *dev = NULL;
    pl_be_calib_t c;

    cr_assert(pl_be_probe(cpu, info, 2, &n) == PL_OK);
    cr_expect(n == 1);
    cr_expect(strcmp(info[0].backend, "cpu") == 0 && info[0].index == 0);
    cr_expect(info[0].name[0] != '\0');
    cr_expect(info[0].cores >= 1 && info[0].cores <= sysconf(_SC_NPROCESSORS_CONF));
    cr_expect(info[0].mem_bytes > (1u << 20));
    cr_expect(pl_be_probe(cpu, info, 0, &n) == PL_ERR_INVALID);

    cr_expect(pl_be_device_open(cpu, 1, 0, &dev) == PL_ERR_NOT_FOUND);
    cr_expect(pl_be_device_open(cpu, 0, -1, &dev) == PL_ERR_INVALID);
    cr_expect_null(dev);
    cr_assert(pl_be_device_open(cpu, 0, 0, &dev) == PL_OK);
    double t0 = pl_now();
    cr_assert(pl_be_device_calibrate(dev, &c) == PL_OK, "%s", pl_error_msg());
    double t = pl_now() - t0;
    /* reported, not asserted: its time is the machine's load as much as ours */
    cr_log_info("calibration took %.2f s", t);
    cr_expect(c.gflops > 0.1 && c.gflops < 1e6, "gflops %g", c.gflops);
    cr_expect(c.mem_gbps > 0.1 && c.mem_gbps < 1e5, "mem %g GB/s", c.mem_gbps);
    pl_be_device_close(&dev);

    json_t *h = NULL;
    cr_assert(pl_be_device_open(cpu, 0, 1, &dev) == PL_OK);
    cr_expect(pl_be_device_health(dev, &h) == PL_ERR_UNSUPPORTED && !h);
    pl_be_device_close(&dev);
}

/* Every ISA word reported is a flag of /proc/cpuinfo. */
Test(cpu_device, isa_flags_come_from_cpuinfo)
{
    pl_be_device_info_t info;
    int n;
    char *line = NULL, flags[8192] = "";
    size_t cap = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    cr_assert(f);
    while (getline(&line, &cap, f) > 0)
        if (!flags[0] && (!strncmp(line, "flags", 5) || !strncmp(line, "Features", 8)))
            snprintf(flags, sizeof(flags), " %s ", strchr(line, ':') + 1);
    free(line);
    fclose(f);
    for (char *p = flags; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    cr_assert(pl_be_probe(pl_be_cpu(), &info, 1, &n) == PL_OK);
    char isa[sizeof(info.isa)], *save = NULL;
    snprintf(isa, sizeof(isa), "%s", info.isa);
    for (char *w = strtok_r(isa, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char needle[64];
        snprintf(needle, sizeof(needle), " %s ", w);
        cr_expect(strstr(flags, needle) != NULL, "isa '%s' not in cpuinfo flags", w);
    }
    if (strstr(flags, " avx2 "))
        cr_expect(strstr(info.isa, "avx2") != NULL, "isa '%s' misses avx2", info.isa);
}
