/* The rendezvous store's messages, parsed and written (layouts in store_wire.h). Every parser
 * checks a field as soon as its bytes are in, so a stranger's junk is refused on its first
 * wrong byte, not after a length it made up has been waited for. */
#include "comm/store_wire.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/random.h>

static const uint8_t SERVER_MAGIC[4] = {'Z', 'S', 'S', 's'};
static const uint8_t CLIENT_MAGIC[4] = {'Z', 'S', 'S', 'c'};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> 8 * i);
}

/* The magic is judged on however many of its bytes have arrived. */
static int magic_ok(const uint8_t *b, size_t n, const uint8_t *magic) {
    return !memcmp(b, magic, n < 4 ? n : 4);
}

int zs_wire_parse_server_hello(const uint8_t *b, size_t n, zs_wire_server_hello *h,
                               const char **why) {
    if (!magic_ok(b, n, SERVER_MAGIC)) return *why = "not a zshard rendezvous store", ZS_WIRE_BAD;
    if (n < ZS_WIRE_SERVER_HELLO) return ZS_WIRE_NEED;
    h->version = rd16(b + 4);
    h->flags = rd16(b + 6);
    memcpy(h->nonce, b + 8, ZS_WIRE_NONCE);
    return ZS_WIRE_OK;
}

int zs_wire_parse_hello(const uint8_t *b, size_t n, zs_wire_hello *h, size_t *used,
                        const char **why) {
    if (!magic_ok(b, n, CLIENT_MAGIC)) return *why = "wrong magic", ZS_WIRE_BAD;
    if (n >= 6 && rd16(b + 4) != ZS_WIRE_VERSION) return *why = "protocol version", ZS_WIRE_BAD;
    if (n >= 8 && (rd16(b + 6) == 0 || rd16(b + 6) > ZS_WIRE_JOB_MAX))
        return *why = "job identity length", ZS_WIRE_BAD;
    if (n < ZS_WIRE_HELLO_FIXED) return ZS_WIRE_NEED;
    size_t jl = rd16(b + 6);
    if (n < ZS_WIRE_HELLO_FIXED + jl) return ZS_WIRE_NEED;
    h->version = rd16(b + 4);
    h->rank = rd32(b + 8);
    h->world = rd32(b + 12);
    memcpy(h->nonce, b + 16, ZS_WIRE_NONCE);
    memcpy(h->mac, b + 48, ZS_WIRE_MAC);
    memcpy(h->job, b + ZS_WIRE_HELLO_FIXED, jl);
    h->job[jl] = '\0';
    for (size_t i = 0; i < jl; i++)
        if ((unsigned char)h->job[i] < 0x20 || h->job[i] == 0x7f)
            return *why = "job identity is not text", ZS_WIRE_BAD;
    if (h->world == 0 || h->rank >= h->world) return *why = "rank or world size", ZS_WIRE_BAD;
    *used = ZS_WIRE_HELLO_FIXED + jl;
    return ZS_WIRE_OK;
}

int zs_wire_parse_answer(const uint8_t *b, size_t n, zs_wire_answer *a, size_t *used,
                         const char **why) {
    if (n >= 1 && b[0] > ZS_WIRE_RETRY) return *why = "unknown answer", ZS_WIRE_BAD;
    if (n >= 3 && rd16(b + 1) >= sizeof a->msg) return *why = "answer too long", ZS_WIRE_BAD;
    if (n < ZS_WIRE_ANSWER_FIXED) return ZS_WIRE_NEED;
    size_t ml = rd16(b + 1);
    if (n < ZS_WIRE_ANSWER_FIXED + ml) return ZS_WIRE_NEED;
    a->status = b[0];
    memcpy(a->mac, b + 3, ZS_WIRE_MAC);
    for (size_t i = 0; i < ml; i++) {
        char c = (char)b[ZS_WIRE_ANSWER_FIXED + i];
        a->msg[i] = (unsigned char)c < 0x20 || c == 0x7f ? '?' : c;
    }
    a->msg[ml] = '\0';
    *used = ZS_WIRE_ANSWER_FIXED + ml;
    return ZS_WIRE_OK;
}

int zs_wire_parse_req(const uint8_t *b, size_t n, zs_wire_req *r, const char **why) {
    if (n >= 1 && (b[0] < ZS_WIRE_SET || b[0] > ZS_WIRE_BYE)) return *why = "command", ZS_WIRE_BAD;
    if (n >= 5 && (rd32(b + 1) == 0 || rd32(b + 1) > ZS_WIRE_KEY_MAX))
        return *why = "key length", ZS_WIRE_BAD;
    if (n >= 9 && rd32(b + 5) > ZS_WIRE_VALUE_MAX) return *why = "value length", ZS_WIRE_BAD;
    if (n >= 9 && b[0] == ZS_WIRE_ADD && rd32(b + 5) != 8)
        return *why = "add without an 8-byte value", ZS_WIRE_BAD;
    if (n < ZS_WIRE_REQ_HDR) return ZS_WIRE_NEED;
    r->cmd = b[0];
    r->klen = rd32(b + 1);
    r->vlen = rd32(b + 5);
    r->size = ZS_WIRE_REQ_HDR + (size_t)r->klen + r->vlen;
    if (n < r->size) return ZS_WIRE_NEED;
    r->key = b + ZS_WIRE_REQ_HDR;
    r->val = r->key + r->klen;
    if (memchr(r->key, 0, r->klen)) return *why = "key holds a NUL byte", ZS_WIRE_BAD;
    return ZS_WIRE_OK;
}

size_t zs_wire_put_server_hello(uint8_t *out, uint16_t flags, const uint8_t *nonce) {
    memcpy(out, SERVER_MAGIC, 4);
    wr16(out + 4, ZS_WIRE_VERSION);
    wr16(out + 6, flags);
    memcpy(out + 8, nonce, ZS_WIRE_NONCE);
    return ZS_WIRE_SERVER_HELLO;
}

size_t zs_wire_put_hello(uint8_t *out, const zs_wire_hello *h) {
    size_t jl = strnlen(h->job, ZS_WIRE_JOB_MAX);
    memcpy(out, CLIENT_MAGIC, 4);
    wr16(out + 4, h->version);
    wr16(out + 6, (uint16_t)jl);
    wr32(out + 8, h->rank);
    wr32(out + 12, h->world);
    memcpy(out + 16, h->nonce, ZS_WIRE_NONCE);
    memcpy(out + 48, h->mac, ZS_WIRE_MAC);
    memcpy(out + ZS_WIRE_HELLO_FIXED, h->job, jl);
    return ZS_WIRE_HELLO_FIXED + jl;
}

size_t zs_wire_put_answer(uint8_t *out, uint8_t status, const uint8_t *mac, const char *msg) {
    size_t ml = strnlen(msg, sizeof ((zs_wire_answer *)0)->msg - 1);
    out[0] = status;
    wr16(out + 1, (uint16_t)ml);
    memcpy(out + 3, mac, ZS_WIRE_MAC);
    memcpy(out + ZS_WIRE_ANSWER_FIXED, msg, ml);
    return ZS_WIRE_ANSWER_FIXED + ml;
}

void zs_wire_put_req_hdr(uint8_t *out, uint8_t cmd, uint32_t klen, uint32_t vlen) {
    out[0] = cmd;
    wr32(out + 1, klen);
    wr32(out + 5, vlen);
}

static int hmac(const uint8_t *secret, size_t secret_len, const uint8_t *msg, size_t n,
                uint8_t *mac) {
    memset(mac, 0, ZS_WIRE_MAC);
    if (!secret_len) return 0;
    unsigned int got = 0;
    if (!HMAC(EVP_sha256(), secret, (int)secret_len, msg, n, mac, &got) || got != ZS_WIRE_MAC)
        return -1;
    return 0;
}

int zs_wire_hello_mac(const uint8_t *secret, size_t secret_len, const uint8_t *nonce_s,
                      const zs_wire_hello *h, uint8_t *mac) {
    static const char label[] = "zshard-store-hello";
    uint8_t m[sizeof label + 2 * ZS_WIRE_NONCE + 8 + ZS_WIRE_JOB_MAX], *p = m;
    size_t jl = strnlen(h->job, ZS_WIRE_JOB_MAX);
    memcpy(p, label, sizeof label), p += sizeof label;
    memcpy(p, nonce_s, ZS_WIRE_NONCE), p += ZS_WIRE_NONCE;
    memcpy(p, h->nonce, ZS_WIRE_NONCE), p += ZS_WIRE_NONCE;
    wr32(p, h->rank), p += 4;
    wr32(p, h->world), p += 4;
    memcpy(p, h->job, jl), p += jl;
    return hmac(secret, secret_len, m, (size_t)(p - m), mac);
}

int zs_wire_welcome_mac(const uint8_t *secret, size_t secret_len, const uint8_t *nonce_s,
                        const uint8_t *nonce_c, uint8_t status, const char *job, uint8_t *mac) {
    static const char label[] = "zshard-store-welcome";
    uint8_t m[sizeof label + 2 * ZS_WIRE_NONCE + 1 + ZS_WIRE_JOB_MAX], *p = m;
    size_t jl = strnlen(job, ZS_WIRE_JOB_MAX);
    memcpy(p, label, sizeof label), p += sizeof label;
    memcpy(p, nonce_c, ZS_WIRE_NONCE), p += ZS_WIRE_NONCE;
    memcpy(p, nonce_s, ZS_WIRE_NONCE), p += ZS_WIRE_NONCE;
    *p++ = status;
    memcpy(p, job, jl), p += jl;
    return hmac(secret, secret_len, m, (size_t)(p - m), mac);
}

int zs_wire_mac_equal(const uint8_t *a, const uint8_t *b) {
    return CRYPTO_memcmp(a, b, ZS_WIRE_MAC) == 0;
}

int zs_wire_random(uint8_t *out, size_t n) {
    while (n > 0) {
        ssize_t got = getrandom(out, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        out += got;
        n -= (size_t)got;
    }
    return 0;
}
