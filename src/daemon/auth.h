/* auth.h - API keys: made from 24 random bytes, shown once, stored only
 * as a BLAKE2b hash (libsodium).  A key is high-entropy, so a plain fast
 * hash is enough: no password-style stretching is needed to make the
 * stored hashes useless to someone who reads the database. */
#ifndef SBX_DAEMON_AUTH_H
#define SBX_DAEMON_AUTH_H

#include "store.h"

#define SBX_KEY_PREFIX "sbx_"
#define SBX_KEY_LEN (4 + 48)

/* sodium_init(); call once before threads. */
int sbx_auth_init(sbx_error *err);

/* hex BLAKE2b-256 of the key */
void sbx_auth_hash(const char *key, char out[65]);

/* Make and store a key named `name`; the key (shown once) goes to out. */
int sbx_auth_create(sbx_store *st, const char *name, char out[SBX_KEY_LEN + 1], sbx_error *err);

/* Register SBX_API_KEY's value (idempotent), named "env-<hash prefix>". */
int sbx_auth_register_env(sbx_store *st, const char *key, sbx_error *err);

/* Check an Authorization header value: 1 valid (out filled), 0 not. */
int sbx_auth_check(sbx_store *st, const char *authorization, sbx_key *out);

/* n random bytes as 2n hex characters. */
void sbx_random_hex(char *out, size_t nbytes);

#endif
