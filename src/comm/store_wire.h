/* The rendezvous store's wire protocol (docs/comm.md, "The rendezvous store"): the greeting
 * that makes a TCP connection a rank of one job, and the requests that follow it. Pure
 * parsers and writers over byte buffers, shared by the server, the client and the fuzzer.
 *
 *   server -> client, on accept   "ZSSs" u16 version u16 flags  nonce_s[32]          40 bytes
 *   client -> server, hello       "ZSSc" u16 version u16 job_len u32 rank u32 world
 *                                  nonce_c[32] mac[32] job[job_len]                80 + job
 *   server -> client, answer      u8 status u16 msg_len mac[32] msg[msg_len]        35 + msg
 *   then requests                 u8 cmd u32 key_len u32 value_len key value        9 + ...
 *   and replies                   u8 status u32 0 u32 value_len value
 *
 * Integers are little-endian. With a shared secret (flags bit 0) the client's mac is
 * HMAC-SHA256(secret, "zshard-store-hello" nonce_s nonce_c rank world job) and the server's
 * HMAC-SHA256(secret, "zshard-store-welcome" nonce_c nonce_s status job); without one both
 * are zero. A fresh nonce on each side makes every connection's proof its own. */
#ifndef ZS_COMM_STORE_WIRE_H
#define ZS_COMM_STORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define ZS_WIRE_VERSION 2
#define ZS_WIRE_NONCE 32
#define ZS_WIRE_MAC 32
#define ZS_WIRE_JOB_MAX 255
#define ZS_WIRE_KEY_MAX 1024
#define ZS_WIRE_VALUE_MAX 65536
#define ZS_WIRE_SERVER_HELLO 40
#define ZS_WIRE_HELLO_FIXED 80
#define ZS_WIRE_ANSWER_FIXED 35
#define ZS_WIRE_REQ_HDR 9
#define ZS_WIRE_FLAG_SECRET 1u

enum { ZS_WIRE_NEED = 0, ZS_WIRE_OK = 1, ZS_WIRE_BAD = -1 };
/* The hello's answer. RETRY: this store's round is over (its ranks said goodbye); connect
 * again, to the next store on the port. */
enum { ZS_WIRE_WELCOME = 0, ZS_WIRE_REFUSED = 1, ZS_WIRE_RETRY = 2 };
enum { ZS_WIRE_SET = 1, ZS_WIRE_GET = 2, ZS_WIRE_ADD = 3, ZS_WIRE_BYE = 4 };
/* A request's reply status: done, failed (no room), or the job cannot meet (the value is the
 * reason, for the rank to report). */
enum { ZS_WIRE_DONE = 0, ZS_WIRE_FAILED = 1, ZS_WIRE_JOB_FAILED = 2 };

typedef struct zs_wire_server_hello {
    uint16_t version, flags;
    uint8_t nonce[ZS_WIRE_NONCE];
} zs_wire_server_hello;

typedef struct zs_wire_hello {
    uint16_t version;
    uint32_t rank, world;
    uint8_t nonce[ZS_WIRE_NONCE], mac[ZS_WIRE_MAC];
    char job[ZS_WIRE_JOB_MAX + 1];
} zs_wire_hello;

typedef struct zs_wire_answer {
    uint8_t status;
    uint8_t mac[ZS_WIRE_MAC];
    char msg[512];
} zs_wire_answer;

typedef struct zs_wire_req {
    uint8_t cmd;
    uint32_t klen, vlen;
    const uint8_t *key, *val;
    size_t size; /* bytes the request takes in the buffer */
} zs_wire_req;

/* Each parser returns ZS_WIRE_NEED (a prefix of a valid message: read more), ZS_WIRE_OK
 * (*used bytes, or r->size, form one message) or ZS_WIRE_BAD with *why naming the fault.
 * A BAD never needs more input to be decided: it is reported as soon as a byte is wrong. */
int zs_wire_parse_server_hello(const uint8_t *b, size_t n, zs_wire_server_hello *h,
                               const char **why);
int zs_wire_parse_hello(const uint8_t *b, size_t n, zs_wire_hello *h, size_t *used,
                        const char **why);
int zs_wire_parse_answer(const uint8_t *b, size_t n, zs_wire_answer *a, size_t *used,
                         const char **why);
int zs_wire_parse_req(const uint8_t *b, size_t n, zs_wire_req *r, const char **why);

/* Writers return the bytes written into out (callers size it from the constants above). */
size_t zs_wire_put_server_hello(uint8_t *out, uint16_t flags, const uint8_t *nonce);
size_t zs_wire_put_hello(uint8_t *out, const zs_wire_hello *h);
size_t zs_wire_put_answer(uint8_t *out, uint8_t status, const uint8_t *mac, const char *msg);
void zs_wire_put_req_hdr(uint8_t *out, uint8_t cmd, uint32_t klen, uint32_t vlen);

/* The two proofs (zero-filled when secret_len is 0). 0 on success, -1 when libcrypto fails. */
int zs_wire_hello_mac(const uint8_t *secret, size_t secret_len, const uint8_t *nonce_s,
                      const zs_wire_hello *h, uint8_t *mac);
int zs_wire_welcome_mac(const uint8_t *secret, size_t secret_len, const uint8_t *nonce_s,
                        const uint8_t *nonce_c, uint8_t status, const char *job, uint8_t *mac);
/* Constant-time comparison of two macs: 1 when equal. */
int zs_wire_mac_equal(const uint8_t *a, const uint8_t *b);
/* Fill n bytes from the kernel's random source. 0 on success. */
int zs_wire_random(uint8_t *out, size_t n);

#endif
