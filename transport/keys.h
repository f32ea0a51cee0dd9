/* CURVE key files and the local state directory: a secret key file holds one Z85 secret key
 * (0600, its public key is derived), a public key file one Z85 public key. */
#ifndef PL_TRANSPORT_KEYS_H
#define PL_TRANSPORT_KEYS_H

#include "common/status.h"
#include "transport/sock.h"

#include <stddef.h>

#define PL_TX_KEY_LEN 40 /* Z85 characters of a CURVE key */

/* The pair of a client or server: Z85, NUL-terminated. */
typedef struct {
    char public_key[PL_TX_KEY_LEN + 1];
    char secret_key[PL_TX_KEY_LEN + 1];
} pl_tx_keypair_t;

/* Write a fresh pair as `base`.key (the secret, mode 0600, never over an existing file) and
 * `base`.pub (the public key, 0644). */
pl_status_t pl_tx_key_generate(const char *base, pl_tx_keypair_t *pair_p);
/* Read a secret key file: a regular file no one else may read or write (mode & 077 == 0), one
 * Z85 key and an optional newline. Errors name the file, never quote its contents. */
pl_status_t pl_tx_key_load_secret(const char *path, pl_tx_keypair_t *pair_p);
/* Read a public key file (one Z85 key, an optional newline) into out (PL_TX_KEY_LEN + 1). */
pl_status_t pl_tx_key_load_public(const char *path, char *out);

/* The local cluster's key directory: keys/ in the state directory ($PIPELD_STATE_DIR, else
 * $XDG_STATE_HOME/pipeld, else $HOME/.local/state/pipeld). */
pl_status_t pl_tx_key_local_dir(char *out, size_t out_len);
/* Make sure `dir` holds the local cluster's keys (coordinator, node, admin pairs), creating
 * them at first use in a fresh 0700 directory renamed into place, so concurrent first starts
 * agree on one set. An existing directory must be 0700 and owned by this user. */
pl_status_t pl_tx_key_local_ensure(const char *dir);
/* One pair of the local state directory by role name ("coordinator", "node", "admin"). */
pl_status_t pl_tx_key_local_pair(const char *dir, const char *which, pl_tx_keypair_t *pair_p);

/* CURVE for a client socket (pipeld, pipectl), before connect, and a handshake monitor:
 * with key_file, that pair and the coordinator's public key server_public (required); with only
 * server_public, a throwaway pair (which no allow-list admits: the coordinator refuses it and
 * the monitor says so); with neither, no CURVE when
 * $PIPELD_INSECURE is 1 (a coordinator with security.insecure), else the local state
 * directory's pair `local_role` ("node", "admin") and its coordinator.pub, the directory made
 * here when this process is the first of the local cluster to start. *how_p (may be NULL) says
 * which, for logs. */
pl_status_t pl_tx_key_client_setup(pl_tx_sock_t *s, const char *server_public, const char *key_file,
                                   const char *local_role, const char **how_p);

#endif
