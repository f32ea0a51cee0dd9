/* A main() for a libFuzzer harness without libFuzzer: runs every file named on the command line,
 * and every file in each directory named, through LLVMFuzzerTestOneInput once, as a unit test
 * does. A harness that finds a broken invariant aborts, so a regression fails the run. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define S_MAX_INPUT (16u << 20)

/* Run one file; -1 when it cannot be read. */
static int s_run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0 || sb.st_size < 0 || (size_t)sb.st_size > S_MAX_INPUT) {
        fprintf(stderr, "fuzz driver: %s: cannot read (or over %u bytes)\n", path, S_MAX_INPUT);
        if (f)
            fclose(f);
        return -1;
    }
    size_t n = (size_t)sb.st_size;
    /* an exact-size heap copy, as libFuzzer gives, so a sanitizer sees a read past the end */
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "fuzz driver: %s: short read\n", path);
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int s_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run every regular file of a directory in name order; the number run, or -1. */
static int s_run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int ran = 0;
    if (!d) {
        fprintf(stderr, "fuzz driver: %s: cannot open\n", dir);
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, cap * sizeof(*names));
            if (!grown)
                abort();
            names = grown;
        }
        if (!(names[n++] = strdup(e->d_name)))
            abort();
    }
    closedir(d);
    qsort(names, n, sizeof(*names), s_cmp);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (s_run_file(path) != 0)
                ran = -1;
            else if (ran >= 0)
                ran++;
        }
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    int total = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        int n = stat(argv[i], &sb) == 0 && S_ISDIR(sb.st_mode) ? s_run_dir(argv[i])
                                                               : s_run_file(argv[i]) == 0;
        if (n < 0)
            return 1;
        total += n;
    }
    printf("%s: %d inputs\n", argv[0], total);
    return 0;
}
