/* Peer authentication and region secrets.
 *
 * The cluster key (32 bytes, written as 64 hex digits in a file of mode 0600 that
 * `moractl keygen` makes) is shared by the daemons of a cluster. Before a peer control link or a
 * data stream serves anything, both ends prove they hold it: each sends a fresh 32-byte nonce and
 * answers the other's with HMAC-SHA256(key, label || their nonce || our nonce), a different label
 * per direction and per link kind, so that no answer can be reflected or replayed. libsodium does
 * the cryptography (crypto_auth_hmacsha256, randombytes_buf, sodium_memcmp); nothing here is
 * hand-written crypto. This is authentication, not encryption: the bytes themselves travel in
 * clear.
 *
 * A region secret (128 bits from getrandom, drawn at registration) is the capability a handle
 * carries: checked in constant time on every open and every cross-node request naming a region. */
#ifndef MORID_AUTH_H
#define MORID_AUTH_H
#include <stddef.h>
#include <stdint.h>

#define AUTH_KEY_BYTES 32
#define AUTH_NONCE_BYTES 32
#define AUTH_MAC_BYTES 32
#define REGION_SECRET_BYTES 16

/* The labels: one per direction of each kind of link. */
#define AUTH_CTL_SERVER "mori/1 peer control: listener"
#define AUTH_CTL_CLIENT "mori/1 peer control: dialer"
#define AUTH_DATA_TARGET "mori/1 data stream: target"
#define AUTH_DATA_INITIATOR "mori/1 data stream: initiator"

struct auth_key {
	int on;                   /* a key was configured */
	uint8_t k[AUTH_KEY_BYTES];
};

/* Once per process, before any other call (libsodium's own initialisation). 0 or -1. */
int auth_init(void);
/* Read the key file at path: 64 hex digits (surrounding white space allowed), the file a regular
 * file of mode 0600 or stricter owned by this uid or root. 0, or -1 with the reason in err. */
int auth_load_key(const char *path, struct auth_key *key, char *err, size_t errlen);
/* auth_load_key's verdict on path, the key itself not kept: how the start and --check-config
 * refuse a missing, readable-by-others or malformed key file before anything is bound. 0 or -1
 * with the reason in err. */
int auth_check_key_file(const char *path, char *err, size_t errlen);
/* Parse 64 hex digits (then only white space) into a key. 0 or -1. */
int auth_parse_key(const char *text, uint8_t k[AUTH_KEY_BYTES]);
/* mac = HMAC-SHA256(key, label || a || b), a and b AUTH_NONCE_BYTES each. */
void auth_mac(const struct auth_key *key, const char *label, const uint8_t *a, const uint8_t *b,
	      uint8_t mac[AUTH_MAC_BYTES]);
/* Does mac answer (label, a, b) under key? Constant time. 1 yes, 0 no (always 0 without a key). */
int auth_check(const struct auth_key *key, const char *label, const uint8_t *a, const uint8_t *b,
	       const uint8_t *mac, size_t maclen);
/* A fresh nonce. */
void auth_nonce(uint8_t n[AUTH_NONCE_BYTES]);
/* Constant-time comparison of n bytes (a region secret against what a request carries); a NULL
 * or short b never matches. 1 equal, 0 not. */
int auth_equal(const uint8_t *a, const uint8_t *b, size_t blen, size_t n);
/* n random bytes from the kernel (getrandom). 0 or -1. */
int auth_random(void *buf, size_t n);
#endif
