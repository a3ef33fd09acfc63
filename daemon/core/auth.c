/* Peer authentication and region secrets (auth.h): libsodium for the cryptography. */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int auth_init(void)
{
	return sodium_init() < 0 ? -1 : 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int auth_parse_key(const char *text, uint8_t k[AUTH_KEY_BYTES])
{
	const char *p = text;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	for (int i = 0; i < AUTH_KEY_BYTES; i++) {
		int hi = hexval(p[2 * i]), lo = hi < 0 ? -1 : hexval(p[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		k[i] = (uint8_t)(hi << 4 | lo);
	}
	for (p += 2 * AUTH_KEY_BYTES; *p; p++)
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
			return -1;
	return 0;
}

int auth_load_key(const char *path, struct auth_key *key, char *err, size_t errlen)
{
	char buf[256];
	struct stat st;
	memset(key, 0, sizeof(*key));
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		snprintf(err, errlen, "cluster_key_file %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "cluster_key_file %s: not a regular file", path);
		close(fd);
		return -1;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen, "cluster_key_file %s has mode %04o: it must be readable by its owner only "
			 "(chmod 0600)", path, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		snprintf(err, errlen, "cluster_key_file %s is owned by uid %u, not by morid's uid %u or root", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		close(fd);
		return -1;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "cluster_key_file %s: %s", path, strerror(errno));
		return -1;
	}
	buf[n] = 0;
	int rc = auth_parse_key(buf, key->k);
	sodium_memzero(buf, sizeof(buf));
	if (rc != 0) {
		snprintf(err, errlen, "cluster_key_file %s: not a key (64 hex digits; make one with moractl keygen)",
			 path);
		return -1;
	}
	key->on = 1;
	return 0;
}

int auth_check_key_file(const char *path, char *err, size_t errlen)
{
	struct auth_key key;
	int rc = auth_load_key(path, &key, err, errlen);
	sodium_memzero(&key, sizeof(key));
	return rc;
}

void auth_mac(const struct auth_key *key, const char *label, const uint8_t *a, const uint8_t *b,
	      uint8_t mac[AUTH_MAC_BYTES])
{
	crypto_auth_hmacsha256_state st;
	crypto_auth_hmacsha256_init(&st, key->k, sizeof(key->k));
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label) + 1);
	crypto_auth_hmacsha256_update(&st, a, AUTH_NONCE_BYTES);
	crypto_auth_hmacsha256_update(&st, b, AUTH_NONCE_BYTES);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(&st, sizeof(st));
}

int auth_check(const struct auth_key *key, const char *label, const uint8_t *a, const uint8_t *b,
	       const uint8_t *mac, size_t maclen)
{
	uint8_t want[AUTH_MAC_BYTES];
	if (!key->on || !mac || maclen != AUTH_MAC_BYTES)
		return 0;
	auth_mac(key, label, a, b, want);
	return sodium_memcmp(want, mac, AUTH_MAC_BYTES) == 0;
}

void auth_nonce(uint8_t n[AUTH_NONCE_BYTES])
{
	randombytes_buf(n, AUTH_NONCE_BYTES);
}

int auth_equal(const uint8_t *a, const uint8_t *b, size_t blen, size_t n)
{
	if (!b || blen != n)
		return 0;
	return sodium_memcmp(a, b, n) == 0;
}

int auth_random(void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom((char *)buf + got, n - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}
