/* CURVE key files: generation with safe permissions, strict reading, and the local state
 * directory that the embedded default cluster's processes share. */
#include "transport/keys.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

static bool s_is_z85(const char *s, size_t n)
{
    static const char z85[] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                              ".-:+=^!/*?&<>()[]{}@%$#";
    for (size_t i = 0; i < n; i++)
        if (!s[i] || !strchr(z85, s[i]))
            return false;
    return true;
}

static pl_status_t s_write(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    size_t n = strlen(text);
    if (fd < 0)
        return pl_error(PL_ERR_IO, "key file %s: %s", path, strerror(errno));
    if (fchmod(fd, mode) != 0 || write(fd, text, n) != (ssize_t)n || fsync(fd) != 0) {
        int err = errno;
        close(fd);
        unlink(path);
        return pl_error(PL_ERR_IO, "key file %s: %s", path, strerror(err));
    }
    close(fd);
    return PL_OK;
}

pl_status_t pl_tx_key_generate(const char *base, pl_tx_keypair_t *pair_p)
{
    pl_tx_keypair_t p;
    char path[4096], text[PL_TX_KEY_LEN + 2];
    pl_status_t st;
    if (zmq_curve_keypair(p.public_key, p.secret_key) != 0)
        return pl_error(PL_ERR_UNSUPPORTED, "key generation: libzmq without CURVE");
    if (snprintf(path, sizeof(path), "%s.key", base) >= (int)sizeof(path))
        return pl_error(PL_ERR_INVALID, "key file name too long");
    snprintf(text, sizeof(text), "%s\n", p.secret_key);
    if ((st = s_write(path, text, 0600)))
        return st;
    snprintf(path, sizeof(path), "%s.pub", base);
    snprintf(text, sizeof(text), "%s\n", p.public_key);
    if ((st = s_write(path, text, 0644))) {
        snprintf(path, sizeof(path), "%s.key", base);
        unlink(path);
        return st;
    }
    if (pair_p)
        *pair_p = p;
    return PL_OK;
}

/* One key of a file: 40 Z85 characters and an optional newline, nothing else. */
static pl_status_t s_read_key(const char *path, bool secret, char *out)
{
    char buf[PL_TX_KEY_LEN + 3];
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ELOOP)
        fd = open(path, O_RDONLY | O_CLOEXEC); /* a public key may be a link; checked below */
    if (fd < 0)
        return pl_error(PL_ERR_IO, "key file %s: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pl_error(PL_ERR_INVALID, "key file %s: not a regular file", path);
    }
    if (secret && (sb.st_mode & 077)) {
        close(fd);
        return pl_error(PL_ERR_INVALID,
                        "key file %s: mode %04o lets others read it; it must be "
                        "0600 (chmod 600 %s)",
                        path, (unsigned)(sb.st_mode & 07777), path);
    }
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n == PL_TX_KEY_LEN + 1 && buf[PL_TX_KEY_LEN] == '\n')
        n = PL_TX_KEY_LEN;
    if (n != PL_TX_KEY_LEN || !s_is_z85(buf, PL_TX_KEY_LEN))
        return pl_error(PL_ERR_INVALID, "key file %s: expected one Z85 key of %d characters", path,
                        PL_TX_KEY_LEN);
    memcpy(out, buf, PL_TX_KEY_LEN);
    out[PL_TX_KEY_LEN] = '\0';
    return PL_OK;
}

pl_status_t pl_tx_key_load_secret(const char *path, pl_tx_keypair_t *pair_p)
{
    pl_tx_keypair_t p;
    pl_status_t st = s_read_key(path, true, p.secret_key);
    if (st)
        return st;
    if (zmq_curve_public(p.public_key, p.secret_key) != 0)
        return pl_error(PL_ERR_INVALID, "key file %s: not a CURVE secret key", path);
    *pair_p = p;
    return PL_OK;
}

pl_status_t pl_tx_key_load_public(const char *path, char *out)
{
    return s_read_key(path, false, out);
}

pl_status_t pl_tx_key_local_dir(char *out, size_t out_len)
{
    const char *d = getenv("PIPELD_STATE_DIR"), *x = getenv("XDG_STATE_HOME");
    const char *h = getenv("HOME");
    int n;
    /* keys/ of the state directory the coordinator's database also lives in */
    if (d && *d)
        n = snprintf(out, out_len, "%s/keys", d);
    else if (x && *x == '/')
        n = snprintf(out, out_len, "%s/pipeld/keys", x);
    else if (h && *h == '/')
        n = snprintf(out, out_len, "%s/.local/state/pipeld/keys", h);
    else
        return pl_error(PL_ERR_INVALID, "no state directory: set HOME or PIPELD_STATE_DIR");
    if (n < 0 || (size_t)n >= out_len)
        return pl_error(PL_ERR_INVALID, "state directory path too long");
    return PL_OK;
}

static pl_status_t s_check_dir(const char *dir)
{
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return pl_error(PL_ERR_IO, "state directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() || (sb.st_mode & 077))
        return pl_error(PL_ERR_INVALID,
                        "state directory %s must be a directory of this user "
                        "with mode 0700 (it is %04o)",
                        dir, (unsigned)(sb.st_mode & 07777));
    return PL_OK;
}

/* mkdir -p of dir's parents (0700 for the ones made here). */
static void s_mkdir_parents(const char *dir)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        mkdir(p, 0700);
        *s = '/';
    }
}

static const char *const s_local_names[] = {"coordinator", "node", "admin"};

pl_status_t pl_tx_key_local_ensure(const char *dir)
{
    char tmp[4096], base[4200];
    pl_status_t st;
    struct stat sb;
    if (lstat(dir, &sb) == 0)
        return s_check_dir(dir);
    s_mkdir_parents(dir);
    if (snprintf(tmp, sizeof(tmp), "%s.new-XXXXXX", dir) >= (int)sizeof(tmp))
        return pl_error(PL_ERR_INVALID, "state directory path too long");
    if (!mkdtemp(tmp)) /* mode 0700 */
        return pl_error(PL_ERR_IO, "state directory %s: %s", dir, strerror(errno));
    for (size_t i = 0; i < 3; i++) {
        snprintf(base, sizeof(base), "%s/%s", tmp, s_local_names[i]);
        if ((st = pl_tx_key_generate(base, NULL)))
            goto err_tmp;
    }
    if (rename(tmp, dir) != 0) {
        if (errno != EEXIST && errno != ENOTEMPTY) {
            st = pl_error(PL_ERR_IO, "state directory %s: %s", dir, strerror(errno));
            goto err_tmp;
        }
        st = PL_OK; /* another process made it first: use theirs */
        goto err_tmp;
    }
    pl_log_info("made the local cluster's keys in %s", dir);
    return PL_OK;
err_tmp:
    for (size_t i = 0; i < 3; i++) {
        snprintf(base, sizeof(base), "%s/%s.key", tmp, s_local_names[i]);
        unlink(base);
        snprintf(base, sizeof(base), "%s/%s.pub", tmp, s_local_names[i]);
        unlink(base);
    }
    rmdir(tmp);
    return st ? st : s_check_dir(dir);
}

pl_status_t pl_tx_key_local_pair(const char *dir, const char *which, pl_tx_keypair_t *pair_p)
{
    char path[4200];
    pl_status_t st = s_check_dir(dir);
    if (st)
        return st;
    snprintf(path, sizeof(path), "%s/%s.key", dir, which);
    return pl_tx_key_load_secret(path, pair_p);
}

pl_status_t pl_tx_key_client_setup(pl_tx_sock_t *s, const char *server_public, const char *key_file,
                                   const char *local_role, const char **how_p)
{
    pl_tx_keypair_t p;
    char dir[PATH_MAX], path[PATH_MAX + 32], server[PL_TX_KEY_LEN + 1];
    const char *how;
    pl_status_t st;
    const char *ins = getenv("PIPELD_INSECURE");
    bool has_server = server_public && *server_public, insecure = ins && strcmp(ins, "1") == 0;
    if (key_file && *key_file) {
        if (!has_server)
            return pl_error(PL_ERR_INVALID,
                            "key file %s given without the coordinator's "
                            "public key",
                            key_file);
        if ((st = pl_tx_key_load_secret(key_file, &p)) ||
            (st = pl_tx_sock_curve_client_pair(s, server_public, p.public_key, p.secret_key)))
            return st;
        how = "CURVE with the key file";
    } else if (has_server) {
        if ((st = pl_tx_sock_curve_client(s, server_public)))
            return st;
        how = "CURVE with a throwaway key (admitted by no allow-list: give a key file)";
    } else if (insecure) {
        how = "no CURVE ($PIPELD_INSECURE: for a coordinator with security.insecure)";
    } else {
        /* whoever of the local processes starts first makes the directory */
        if ((st = pl_tx_key_local_dir(dir, sizeof(dir))) || (st = pl_tx_key_local_ensure(dir)))
            return st;
        snprintf(path, sizeof(path), "%s/coordinator.pub", dir);
        if ((st = pl_tx_key_local_pair(dir, local_role, &p)) ||
            (st = pl_tx_key_load_public(path, server)) ||
            (st = pl_tx_sock_curve_client_pair(s, server, p.public_key, p.secret_key)))
            return st;
        how = "CURVE with the local state directory's keys";
    }
    if ((st = pl_tx_sock_monitor(s)))
        return st;
    if (how_p)
        *how_p = how;
    return PL_OK;
}
