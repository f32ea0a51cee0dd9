/* The backends this binary can use: the built-in CPU backend, and the CUDA / HIP plugins loaded
 * with dlopen from $PIPELD_PLUGIN_DIR, the build's plugin directory, or beside the executable. */
#include "backends/backend_impl.h"

#include "common/log.h"
#include "common/util.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define S_MAX_DIRS 4

typedef struct {
    const char *name;
    const char *lib;
} s_plugin_t;

static const s_plugin_t s_plugins[] = {
    {"cuda", "libpipeld_be_cuda.so"},
    {"hip", "libpipeld_be_hip.so"},
};

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static pl_be_entry_t s_entries[1 + PL_ARRAY_SIZE(s_plugins)];
static int s_n_entries;

/* The backends: [0] the CPU, then one per plugin (ops NULL while unavailable). */
static pl_be_t s_backends[1 + PL_ARRAY_SIZE(s_plugins)];

/* Where plugins are looked for, in order: $PIPELD_PLUGIN_DIR, PL_PLUGIN_DIR, the executable's
 * directory and its ../lib. */
static int s_search_dirs(char dirs[S_MAX_DIRS][PATH_MAX])
{
    int n = 0;
    const char *env = getenv("PIPELD_PLUGIN_DIR");
    char exe[PATH_MAX], dir[PATH_MAX];
    ssize_t len;

    if (env && env[0])
        snprintf(dirs[n++], PATH_MAX, "%s", env);
#ifdef PL_PLUGIN_DIR
    snprintf(dirs[n++], PATH_MAX, "%s", PL_PLUGIN_DIR);
#endif
    len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len > 0) {
        exe[len] = '\0';
        pl_path_dirname(exe, dir, sizeof(dir));
        if (snprintf(dirs[n], PATH_MAX, "%s", dir) < PATH_MAX)
            n++;
        if (snprintf(dirs[n], PATH_MAX, "%s/../lib", dir) < PATH_MAX)
            n++;
    }
    return n;
}

/* Open the plugin file at path and check it has a usable device; the first file found is the
 * one used, so a broken plugin in an override directory is reported rather than skipped. */
static void s_open_plugin(const char *path, size_t slot, pl_be_entry_t *e)
{
    typedef const pl_be_ops_t *(*entry_fn_t)(void);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    entry_fn_t entry;
    const pl_be_ops_t *ops;
    pl_be_device_info_t infos[16];
    int n = 0;

    if (!handle) {
        snprintf(e->why, sizeof(e->why), "plugin %.80s: %.165s", path, dlerror());
        return;
    }
    entry = (entry_fn_t)dlsym(handle, PL_BE_PLUGIN_SYMBOL);
    if (!entry) {
        snprintf(e->why, sizeof(e->why), "plugin %.120s: no symbol %s", path, PL_BE_PLUGIN_SYMBOL);
        goto err_close;
    }
    ops = entry();
    if (!ops || ops->abi_version != PL_BE_ABI_VERSION) {
        snprintf(e->why, sizeof(e->why), "plugin %.120s: abi version %d, this binary needs %d",
                 path, ops ? ops->abi_version : -1, PL_BE_ABI_VERSION);
        goto err_close;
    }
    if (!ops->probe || !ops->open || !ops->close || !ops->calibrate || !ops->stage_load ||
        !ops->stage_forward || !ops->stage_unload) {
        snprintf(e->why, sizeof(e->why), "plugin %.120s: function table incomplete", path);
        goto err_close;
    }
    /* Probed through the handle wrapper, so a failure's reason comes over by the one relay
     * (backend.c); the entry is published only once a device is there. The handle stays open
     * from here: a GPU runtime may have started threads in probe. */
    pl_be_t *be = &s_backends[1 + slot];
    *be = (pl_be_t){.ops = ops, .plugin_msg = (const char *(*)(void))dlsym(handle, "pl_error_msg")};
    pl_error_clear();
    if (pl_be_probe(be, infos, (int)PL_ARRAY_SIZE(infos), &n) != PL_OK) {
        snprintf(e->why, sizeof(e->why), "plugin %.80s: %.165s", path,
                 pl_error_msg()[0] ? pl_error_msg() : "no reason given");
        return;
    }
    if (n < 1) {
        snprintf(e->why, sizeof(e->why), "plugin %.120s: no device", path);
        return;
    }
    e->backend = be;
    pl_log_debug("backend %s: plugin %s, %d devices", e->name, path, n);
    return;

err_close:
    dlclose(handle);
}

static void s_load_plugin(size_t slot, pl_be_entry_t *e)
{
    const s_plugin_t *plugin = &s_plugins[slot];
    char dirs[S_MAX_DIRS][PATH_MAX], path[PATH_MAX];
    int n_dirs = s_search_dirs(dirs);
    size_t used;

    for (int i = 0; i < n_dirs; i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dirs[i], plugin->lib) >= (int)sizeof(path))
            continue;
        if (access(path, F_OK) == 0) {
            s_open_plugin(path, slot, e);
            return;
        }
    }
    used = (size_t)snprintf(e->why, sizeof(e->why), "plugin %s not found in", plugin->lib);
    for (int i = 0; i < n_dirs && used < sizeof(e->why); i++)
        used +=
            (size_t)snprintf(e->why + used, sizeof(e->why) - used, "%s %s", i ? "," : "", dirs[i]);
}

static void s_init(void)
{
    pl_be_entry_t *e = &s_entries[s_n_entries++];
    memset(e, 0, sizeof(*e));
    s_backends[0] = (pl_be_t){.ops = pl_be_cpu_ops()};
    e->backend = &s_backends[0];
    snprintf(e->name, sizeof(e->name), "%s", s_backends[0].ops->name);
    for (size_t i = 0; i < PL_ARRAY_SIZE(s_plugins); i++) {
        e = &s_entries[s_n_entries++];
        memset(e, 0, sizeof(*e));
        snprintf(e->name, sizeof(e->name), "%s", s_plugins[i].name);
        s_load_plugin(i, e);
    }
}

int pl_be_registry_list(pl_be_entry_t *entries, int max)
{
    int n;
    pthread_once(&s_once, s_init);
    n = PL_MIN(max, s_n_entries);
    for (int i = 0; i < n; i++)
        entries[i] = s_entries[i];
    return n > 0 ? n : 0;
}

const pl_be_t *pl_be_cpu(void)
{
    pthread_once(&s_once, s_init);
    return &s_backends[0];
}

const pl_be_t *pl_be_registry_find(const char *name)
{
    pthread_once(&s_once, s_init);
    if (!name) {
        pl_error(PL_ERR_INVALID, "backend name missing");
        return NULL;
    }
    for (int i = 0; i < s_n_entries; i++) {
        if (strcmp(s_entries[i].name, name) != 0)
            continue;
        if (!s_entries[i].backend)
            pl_error(PL_ERR_NO_DEVICE, "backend %s unavailable: %s", name, s_entries[i].why);
        return s_entries[i].backend;
    }
    pl_error(PL_ERR_NOT_FOUND, "unknown backend '%s' (known: cpu, cuda, hip)", name);
    return NULL;
}
