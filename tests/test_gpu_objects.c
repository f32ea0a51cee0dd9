/* The GPU plugins carry code for every target they were built for: sm_80 and sm_90 machine code
 * in the CUDA plugin, gfx908/gfx90a/gfx940/gfx1030 in the HIP plugin, for every kernel source.
 * Where a toolkit or plugin is absent the test skips with the reason; with CI=true it fails. */
#include <criterion/criterion.h>

#include "tests/gpu_objects.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_MAX_IMAGES 256

static const char *const s_hip_targets[] = {"gfx908", "gfx90a", "gfx940", "gfx1030"};
static const int s_cuda_sms[] = {80, 90};

/* A missing toolkit or plugin: a skip here, a failure where CI asked for everything. */
#define S_ABSENT(...)                                                                              \
    do {                                                                                           \
        char why_[2048];                                                                            \
        snprintf(why_, sizeof(why_), __VA_ARGS__);                                                 \
        const char *ci_ = getenv("CI");                                                            \
        if (ci_ && strcmp(ci_, "true") == 0)                                                       \
            cr_assert_fail("CI=true, so this may not skip: %s", why_);                                   \
        cr_skip_test("%s", why_);                                                                  \
    } while (0)

static const char *s_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

static void s_plugin_path(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/../lib/%s", s_env("PL_BIN_DIR", PL_BIN_DIR), name);
}

static bool s_exists(const char *path)
{
    return access(path, R_OK) == 0;
}

/* The first of PATH's entries and `extra` that holds an executable `tool`, into buf. */
static bool s_find_tool(const char *tool, const char *extra, char *buf, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s:%s", s_env("PATH", "/usr/bin:/bin"), extra);
    for (char *save = NULL, *dir = strtok_r(path, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(buf, len, "%s/%s", dir, tool);
        if (access(buf, X_OK) == 0)
            return true;
    }
    return false;
}

static uint8_t *s_read(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "open %s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    cr_assert_geq(n, 0);
    rewind(f);
    uint8_t *buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n, "read %s", path);
    fclose(f);
    *len_p = (size_t)n;
    return buf;
}

/* Kernel sources in backends/gpu: each becomes one fat binary / offload bundle in a plugin. */
static int s_count_kernel_sources(void)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/backends/gpu", s_env("PL_SOURCE_DIR", PL_SOURCE_DIR));
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "open %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        n += l > 3 && strcmp(e->d_name + l - 3, ".cu") == 0;
    }
    closedir(d);
    cr_assert_gt(n, 0);
    return n;
}

/* The images of .nv_fatbin in the ELF file at path; every ELF image's own header must agree with
 * the sm its fat binary names. */
static int s_list_elf_file(const char *path, go_image_t *im, int *n_fatbins_p)
{
    size_t len = 0, off = 0, size = 0;
    uint8_t *img = s_read(path, &len);
    int n = 0;
    cr_assert_eq(go_elf_section(img, len, ".nv_fatbin", &off, &size), PL_OK, "%s: %s", path,
                 pl_error_msg());
    cr_assert_eq(go_fatbin_list(img + off, size, im, S_MAX_IMAGES, &n), PL_OK, "%s: %s", path,
                 pl_error_msg());
    cr_assert_leq(n, S_MAX_IMAGES);
    int fatbins = 0;
    for (int i = 0; i < n; i++) {
        if (im[i].kind == GO_KIND_ELF && im[i].elf_sm >= 0)
            cr_expect_eq(im[i].elf_sm, im[i].arch, "%s: image %d labelled sm_%d holds sm_%d code",
                         path, i, im[i].arch, im[i].elf_sm);
        if (im[i].fatbin + 1 > fatbins)
            fatbins = im[i].fatbin + 1;
    }
    free(img);
    *n_fatbins_p = fatbins;
    return n;
}

/* Fat binaries in which an ELF image for sm_`sm` is present. */
static int s_fatbins_with_elf(const go_image_t *im, int n, int sm)
{
    int count = 0, last = -1;
    for (int i = 0; i < n; i++)
        if (im[i].kind == GO_KIND_ELF && im[i].arch == sm && im[i].fatbin != last) {
            count++;
            last = im[i].fatbin;
        }
    return count;
}

/* Commands run under `timeout`, so a hung tool fails its test instead of stalling the suite (a
 * criterion .timeout would do it too, but leaks in criterion's parallel runner under ASan). */
static void s_run(const char *cmd)
{
    char full[8300];
    snprintf(full, sizeof(full), "timeout 120 sh -c '%s'", cmd);
    int rc = system(full);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, cmd);
}

/* ---- the parser against what NVIDIA's own tools write ---- */

Test(gpu_objects, fatbin_listing_matches_what_nvcc_and_fatbinary_wrote)
{
    char nvcc[1024], fatbinary[1024], cmd[8192];
    if (!s_find_tool("nvcc", "/usr/local/cuda/bin", nvcc, sizeof(nvcc)) ||
        !s_find_tool("fatbinary", "/usr/local/cuda/bin", fatbinary, sizeof(fatbinary)))
        S_ABSENT("no nvcc/fatbinary on PATH or in /usr/local/cuda/bin: CUDA toolkit absent");
    char dir[] = "/tmp/pl-gpuobj-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    FILE *f = fopen(strcat(strcpy(cmd, dir), "/k.cu"), "w");
    cr_assert_not_null(f);
    fputs("__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n", f);
    fclose(f);

    /* an object: machine code for sm_75 and sm_86, PTX for compute_86 only */
    snprintf(cmd, sizeof(cmd),
             "cd %s && %s -c -gencode arch=compute_75,code=sm_75 "
             "-gencode arch=compute_86,code=[sm_86,compute_86] k.cu -o k.o",
             dir, nvcc);
    s_run(cmd);
    char path[1100];
    go_image_t im[S_MAX_IMAGES];
    int fatbins = 0;
    snprintf(path, sizeof(path), "%s/k.o", dir);
    int n = s_list_elf_file(path, im, &fatbins);
    cr_assert_eq(fatbins, 1);
    int elf75 = 0, elf86 = 0, ptx86 = 0;
    for (int i = 0; i < n; i++) {
        elf75 += im[i].kind == GO_KIND_ELF && im[i].arch == 75 && im[i].elf_sm == 75;
        elf86 += im[i].kind == GO_KIND_ELF && im[i].arch == 86 && im[i].elf_sm == 86;
        ptx86 += im[i].kind == GO_KIND_PTX && im[i].arch == 86;
    }
    cr_expect_eq(n, 3, "images: %d", n);
    cr_expect_eq(elf75, 1);
    cr_expect_eq(elf86, 1);
    cr_expect_eq(ptx86, 1);

    /* a bare fat binary from fatbinary itself, two cubins and one PTX, in that order */
    snprintf(cmd, sizeof(cmd),
             "cd %s && %s -cubin -arch=sm_80 k.cu -o k80.cubin && "
             "%s -cubin -arch=sm_90 k.cu -o k90.cubin && %s -ptx -arch=compute_80 k.cu -o k.ptx && "
             "%s --64 --create=k.fatbin --image3=kind=elf,sm=80,file=k80.cubin "
             "--image3=kind=elf,sm=90,file=k90.cubin --image3=kind=ptx,sm=80,file=k.ptx",
             dir, nvcc, nvcc, nvcc, fatbinary);
    s_run(cmd);
    size_t len = 0;
    snprintf(path, sizeof(path), "%s/k.fatbin", dir);
    uint8_t *fb = s_read(path, &len);
    cr_assert_eq(go_fatbin_list(fb, len, im, S_MAX_IMAGES, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n, 3);
    cr_expect(im[0].kind == GO_KIND_ELF && im[0].arch == 80 && im[0].elf_sm == 80);
    cr_expect(im[1].kind == GO_KIND_ELF && im[1].arch == 90 && im[1].elf_sm == 90);
    cr_expect(im[2].kind == GO_KIND_PTX && im[2].arch == 80 && im[2].elf_sm == -1);

    /* every truncation fails cleanly, except at a fat binary's end (none here before len) */
    for (size_t cut = 1; cut < len; cut += cut < 200 ? 1 : 97) {
        int m = -1;
        pl_status_t st = go_fatbin_list(fb, cut, im, S_MAX_IMAGES, &m);
        cr_expect_neq(st, PL_OK, "a fat binary cut to %zu of %zu bytes was accepted", cut, len);
    }
    free(fb);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    s_run(cmd);
}

Test(gpu_objects, fatbin_and_elf_errors_name_what_is_wrong)
{
    uint8_t b[256];
    size_t off, size;
    int n = 0;
    memset(b, 0, sizeof(b));
    cr_assert_eq(go_elf_section(b, sizeof(b), ".nv_fatbin", &off, &size), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "no ELF header"));
    memcpy(b, "\177ELF", 4);
    b[4] = 1;
    b[5] = 1;
    cr_assert_eq(go_elf_section(b, sizeof(b), ".nv_fatbin", &off, &size), PL_ERR_UNSUPPORTED);
    b[4] = 2;
    b[0x3a] = 64;
    b[0x3c] = 3; /* three section headers at offset 0x28's value (0): 192 bytes fit */
    b[0x3e] = 7;
    cr_assert_eq(go_elf_section(b, sizeof(b), ".nv_fatbin", &off, &size), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "e_shstrndx 7"), "%s", pl_error_msg());
    b[0x3c] = 5; /* 320 bytes of headers: past the end */
    cr_assert_eq(go_elf_section(b, sizeof(b), ".nv_fatbin", &off, &size), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "past the end"), "%s", pl_error_msg());

    /* a fat binary header claiming more than there is, and a bad magic */
    memset(b, 0, sizeof(b));
    b[0] = 0x50, b[1] = 0xed, b[2] = 0x55, b[3] = 0xba, b[4] = 1, b[6] = 16;
    b[8] = 0xff;
    b[9] = 0x10;
    cr_assert_eq(go_fatbin_list(b, sizeof(b), NULL, 0, &n), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "past the end"), "%s", pl_error_msg());
    b[8] = 64;
    b[9] = 0; /* one 64-byte entry whose header size is 0 */
    cr_assert_eq(go_fatbin_list(b, 80, NULL, 0, &n), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "entry at 16"), "%s", pl_error_msg());
    b[16] = GO_KIND_ELF;
    b[20] = 64;
    b[16 + 28] = 90; /* header 64, payload 0: valid, one image */
    cr_assert_eq(go_fatbin_list(b, 80, NULL, 0, &n), PL_OK, "%s", pl_error_msg());
    cr_assert_eq(n, 1);
    b[0] = 0x51;
    cr_assert_eq(go_fatbin_list(b, 80, NULL, 0, &n), PL_ERR_INVALID);
    cr_assert(strstr(pl_error_msg(), "magic"), "%s", pl_error_msg());
}

/* ---- the plugins ---- */

Test(gpu_objects, cuda_plugin_holds_sm80_and_sm90_code_for_every_kernel)
{
    char so[1100], tool[1024];
    s_plugin_path("libpipeld_be_cuda.so", so, sizeof(so));
    if (!s_exists(so))
        S_ABSENT("%s not built (no nvcc, or PL_WITH_CUDA=OFF)", so);
    go_image_t im[S_MAX_IMAGES];
    int fatbins = 0, n = s_list_elf_file(so, im, &fatbins);
    int sources = s_count_kernel_sources();
    cr_assert_geq(fatbins, sources, "%d fat binaries for %d kernel sources", fatbins, sources);
    for (size_t i = 0; i < sizeof(s_cuda_sms) / sizeof(s_cuda_sms[0]); i++) {
        int with = s_fatbins_with_elf(im, n, s_cuda_sms[i]);
        cr_expect_geq(with, sources, "sm_%d machine code in %d fat binaries, %d kernel sources",
                      s_cuda_sms[i], with, sources);
    }

    /* where NVIDIA's lister is installed (GPU machines), it must list the same cubins */
    if (s_find_tool("cuobjdump", "/usr/local/cuda/bin", tool, sizeof(tool))) {
        char cmd[2300], line[1024];
        snprintf(cmd, sizeof(cmd), "timeout 60 %s --list-elf %s", tool, so);
        FILE *p = popen(cmd, "r");
        cr_assert_not_null(p);
        int listed[2] = {0, 0}, elf = 0;
        while (fgets(line, sizeof(line), p)) {
            listed[0] += strstr(line, ".sm_80.") != NULL;
            listed[1] += strstr(line, ".sm_90.") != NULL;
        }
        cr_assert_eq(pclose(p), 0, "%s failed", cmd);
        for (int i = 0; i < n; i++)
            elf += im[i].kind == GO_KIND_ELF;
        cr_expect_eq(listed[0] + listed[1], elf, "cuobjdump lists %d sm_80 + %d sm_90, we %d",
                     listed[0], listed[1], elf);
        cr_expect_eq(listed[0], s_fatbins_with_elf(im, n, 80));
        cr_expect_eq(listed[1], s_fatbins_with_elf(im, n, 90));
    }
}

Test(gpu_objects, hip_plugin_holds_all_four_targets_for_every_kernel)
{
    char so[1100], tool[1024], cmd[2300], line[1024];
    s_plugin_path("libpipeld_be_hip.so", so, sizeof(so));
    if (!s_find_tool("roc-obj-ls", "/usr/bin", tool, sizeof(tool)))
        S_ABSENT("no roc-obj-ls (Debian package hipcc): HIP toolchain absent");
    if (!s_exists(so))
        S_ABSENT("%s not built (no hipcc, or PL_WITH_HIP=OFF)", so);
    enum { MAX_BUNDLES = 64, N_T = sizeof(s_hip_targets) / sizeof(s_hip_targets[0]) };
    int seen[MAX_BUNDLES][N_T];
    memset(seen, 0, sizeof(seen));
    int bundles = 0, lines = 0;
    snprintf(cmd, sizeof(cmd), "timeout 60 %s %s", tool, so);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    while (fgets(line, sizeof(line), p)) {
        int id = 0;
        char triple[256];
        if (sscanf(line, "%d %255s", &id, triple) != 2)
            continue;
        lines++;
        cr_assert(id >= 1 && id <= MAX_BUNDLES, "bundle id %d: %s", id, line);
        if (id > bundles)
            bundles = id;
        const char *target = strstr(triple, "--");
        if (strncmp(triple, "hipv4-amdgcn-amd-amdhsa", 23) != 0 || !target)
            continue; /* the host entry */
        for (int t = 0; t < N_T; t++)
            if (strcmp(target + 2, s_hip_targets[t]) == 0)
                seen[id - 1][t]++;
    }
    cr_assert_eq(pclose(p), 0, "%s failed", cmd);
    int sources = s_count_kernel_sources();
    cr_assert_gt(lines, 0, "roc-obj-ls listed nothing in %s", so);
    cr_assert_geq(bundles, sources, "%d offload bundles for %d kernel sources", bundles, sources);
    for (int b = 0; b < bundles; b++)
        for (int t = 0; t < N_T; t++)
            cr_expect_eq(seen[b][t], 1, "bundle %d holds %s %d times", b + 1, s_hip_targets[t],
                         seen[b][t]);
}
