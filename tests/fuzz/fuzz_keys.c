/* libFuzzer harness for the CURVE key file reader (transport/keys.c): no file may crash it, one it
 * accepts is exactly one Z85 key (and an optional newline), a secret key file is accepted only
 * when no one else may read it, and its public key is the one CURVE derives. Built by
 * tests/fuzz/CMakeLists.txt (tools/fuzz.sh runs it). Input: a byte whose low bit picks the file's
 * mode (1: 0644, 0: 0600), then the file's bytes. */
#include "transport/keys.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool s_z85(const char *s, size_t n)
{
    static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              ".-:+=^!/*?&<>()[]{}@%$#";
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(z85, s[i]))
            return false;
    return true;
}

static char s_dir[64], s_path[128];

static void s_cleanup(void)
{
    unlink(s_path);
    rmdir(s_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = s_path;
    if (!s_dir[0]) {
        snprintf(s_dir, sizeof(s_dir), "/tmp/pl-fuzz-keys-XXXXXX");
        if (!mkdtemp(s_dir))
            abort();
        snprintf(s_path, sizeof(s_path), "%s/k", s_dir);
        atexit(s_cleanup);
    }
    bool open_mode = size > 0 && (data[0] & 1);
    if (size > 0)
        data++, size--;
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size) ||
        fchmod(fd, open_mode ? 0644 : 0600) != 0)
        abort();
    close(fd);
    /* the shape every accepted file has */
    bool shape = (size == PL_TX_KEY_LEN ||
                  (size == PL_TX_KEY_LEN + 1 && data[PL_TX_KEY_LEN] == '\n')) &&
                 s_z85((const char *)data, PL_TX_KEY_LEN);
    char pub[PL_TX_KEY_LEN + 1];
    if (pl_tx_key_load_public(path, pub) == PL_OK) {
        if (!shape || strlen(pub) != PL_TX_KEY_LEN || memcmp(pub, data, PL_TX_KEY_LEN) != 0)
            abort();
    } else if (shape) {
        abort(); /* a well-formed public key refused */
    }
    pl_tx_keypair_t pair;
    if (pl_tx_key_load_secret(path, &pair) == PL_OK) {
        char again[PL_TX_KEY_LEN + 1];
        if (!shape || open_mode || memcmp(pair.secret_key, data, PL_TX_KEY_LEN) != 0 ||
            pair.secret_key[PL_TX_KEY_LEN] != '\0' || strlen(pair.public_key) != PL_TX_KEY_LEN ||
            !s_z85(pair.public_key, PL_TX_KEY_LEN) ||
            zmq_curve_public(again, pair.secret_key) != 0 || strcmp(again, pair.public_key) != 0)
            abort();
    }
    return 0;
}
