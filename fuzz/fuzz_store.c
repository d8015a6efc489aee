/* libFuzzer target for the rendezvous store's wire protocol (src/comm/store_wire.c): what the
 * server parses from strangers and ranks (hellos, requests) and what a rank parses from
 * whatever answers on MASTER_PORT (the greeting, the answer to its hello). The first byte
 * picks the parser; the rest is the bytes as they arrived. Besides not crashing, each parser
 * must keep its contract with a reader that feeds it a byte at a time:
 *   - a prefix of a message that parses is NEED, never BAD (no valid message is refused
 *     early), and never OK before the message's last byte;
 *   - a BAD prefix stays BAD with more bytes (BAD is decided on the bytes in, so a stranger's
 *     junk is dropped at its first wrong byte);
 *   - a hello or a request that parses is written back byte for byte by its writer.
 * Replayed over fuzz/corpus_store by the ctest fuzz_store; scripts/fuzz.sh runs it. */
#include "comm/store_wire.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One parser behind one signature: returns the parse result, *used the message's size. */
static int parse(int which, const uint8_t *b, size_t n, size_t *used) {
    const char *why = NULL;
    int rc;
    *used = 0;
    if (which == 0) {
        zs_wire_hello h;
        rc = zs_wire_parse_hello(b, n, &h, used, &why);
        if (rc == ZS_WIRE_OK) {
            uint8_t out[ZS_WIRE_HELLO_FIXED + ZS_WIRE_JOB_MAX];
            if (zs_wire_put_hello(out, &h) != *used || memcmp(out, b, *used)) abort();
        }
    } else if (which == 1) {
        zs_wire_req r;
        rc = zs_wire_parse_req(b, n, &r, &why);
        if (rc == ZS_WIRE_OK) {
            uint8_t hdr[ZS_WIRE_REQ_HDR];
            zs_wire_put_req_hdr(hdr, r.cmd, r.klen, r.vlen);
            if (r.size > n || memcmp(hdr, b, sizeof hdr) || r.key != b + ZS_WIRE_REQ_HDR)
                abort();
            *used = r.size;
        }
    } else if (which == 2) {
        zs_wire_answer a;
        rc = zs_wire_parse_answer(b, n, &a, used, &why);
        if (rc == ZS_WIRE_OK && strlen(a.msg) != *used - ZS_WIRE_ANSWER_FIXED) abort();
    } else {
        zs_wire_server_hello h;
        rc = zs_wire_parse_server_hello(b, n, &h, &why);
        *used = ZS_WIRE_SERVER_HELLO;
    }
    if (rc == ZS_WIRE_BAD && !why) abort(); /* every refusal names its fault */
    if (rc == ZS_WIRE_OK && *used > n) abort();
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 4;
    const uint8_t *b = data + 1;
    size_t n = size - 1, used = 0, u;
    int full = parse(which, b, n, &used);
    /* The prefixes a byte-at-a-time reader sees (the first 600, enough for every header). */
    size_t stop = n < 600 ? n : 600;
    int bad_from = -1;
    for (size_t k = 0; k < stop; k++) {
        int rc = parse(which, b, k, &u);
        if (full == ZS_WIRE_OK && k < used && rc != ZS_WIRE_NEED) abort();
        if (rc == ZS_WIRE_BAD && bad_from < 0) bad_from = (int)k;
        if (bad_from >= 0 && rc != ZS_WIRE_BAD) abort();
    }
    if (bad_from >= 0 && full != ZS_WIRE_BAD) abort();
    return 0;
}
