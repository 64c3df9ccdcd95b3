/* auth.c - see auth.h. */
#include "auth.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

int sbx_auth_init(sbx_error *err)
{
    if (sodium_init() < 0)
        return sbx_error_set(err, EIO, "libsodium initialisation failed");
    return 0;
}

void sbx_random_hex(char *out, size_t nbytes)
{
    unsigned char buf[64];
    if (nbytes > sizeof buf)
        nbytes = sizeof buf;
    randombytes_buf(buf, nbytes);
    sodium_bin2hex(out, nbytes * 2 + 1, buf, nbytes);
}

void sbx_auth_hash(const char *key, char out[65])
{
    unsigned char h[32];
    crypto_generichash(h, sizeof h, (const unsigned char *) key, strlen(key), NULL, 0);
    sodium_bin2hex(out, 65, h, sizeof h);
}

static int valid_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return 0;
    }
    return 1;
}

int sbx_auth_create(sbx_store *st, const char *name, char out[SBX_KEY_LEN + 1], sbx_error *err)
{
    if (!valid_name(name))
        return sbx_error_set(err, EINVAL, "key name '%s': use 1-64 letters, digits, '-', '_' or '.'", name);
    char id[17], hash[65];
    memcpy(out, SBX_KEY_PREFIX, 4);
    sbx_random_hex(out + 4, 24);
    sbx_random_hex(id, 8);
    sbx_auth_hash(out, hash);
    return sbx_store_key_add(st, id, name, hash, err);
}

int sbx_auth_register_env(sbx_store *st, const char *key, sbx_error *err)
{
    if (strlen(key) < 16)
        return sbx_error_set(err, EINVAL, "SBX_API_KEY is too short: use at least 16 characters");
    char hash[65], name[32], id[17];
    sbx_auth_hash(key, hash);
    sbx_key k;
    if (sbx_store_key_by_hash(st, hash, &k) == 1)
        return 0;
    snprintf(name, sizeof name, "env-%.8s", hash);
    snprintf(id, sizeof id, "%.16s", hash);
    return sbx_store_key_add(st, id, name, hash, err);
}

int sbx_auth_check(sbx_store *st, const char *authorization, sbx_key *out)
{
    if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *key = authorization + 7;
    while (*key == ' ')
        key++;
    if (!*key || strlen(key) > 256)
        return 0;
    char hash[65];
    sbx_auth_hash(key, hash);
    return sbx_store_key_by_hash(st, hash, out) == 1;
}
