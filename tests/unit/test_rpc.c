/* test_rpc — the RPC layer (common/rpc.c) against an in-process server on
 * 127.0.0.1:0, real gRPC on loopback:
 *  - an _iov method gets the request as gRPC's slices: their bytes, in order,
 *    are the request (sizes from empty to 7 MiB, which arrive in well over 64
 *    slices), and a handler may trim the entries;
 *  - a copying method and an _iov method answer the same bytes;
 *  - 16 threads creating channels and calling at the same time (channel
 *    creation once shared a static argument list between threads: a crash
 *    about one run in four with 16 threads);
 *  - what a failed run is reported as: a server going away (UNAVAILABLE,
 *    ABORTED, and CANCELLED, which gRPC gives a request still arriving when
 *    its server shuts down) is retryable and explains the other failures.
 */
#include "psc.h"
#include "rpc.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define M_ECHO "/psc.Test/Echo"
#define M_SUM "/psc.Test/Sum"

static psc_rpc_server_t *server;
static char addr[64];

/* FNV-1a over bytes, continued across calls. */
static uint64_t fnv(uint64_t h, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void h_echo(psc_rpc_call_t *call, const uint8_t *req, size_t len, void *arg)
{
    (void)arg;
    psc_rpc_reply(call, req, len);
}

/* Replies {total bytes, fnv of the bytes in order, number of segments, fnv
 * after dropping the first byte by trimming the entries}. */
static void h_sum(psc_rpc_call_t *call, psc_iov_t *iov, int niov, size_t len, void *arg)
{
    (void)arg;
    uint64_t out[4] = {0, 14695981039346656037ULL, (uint64_t)niov, 14695981039346656037ULL};
    for (int i = 0; i < niov; i++) {
        out[0] += iov[i].len;
        out[1] = fnv(out[1], iov[i].base, iov[i].len);
    }
    if (out[0] != len) out[0] = UINT64_MAX;
    int i = 0; /* trim one byte off the front, as a handler skipping a header does */
    while (i < niov && iov[i].len == 0) i++;
    if (i < niov) {
        iov[i].base = (const uint8_t *)iov[i].base + 1;
        iov[i].len--;
    }
    for (; i < niov; i++) out[3] = fnv(out[3], iov[i].base, iov[i].len);
    psc_rpc_reply(call, out, sizeof out);
}

static int setup(void **state)
{
    (void)state;
    char err[256];
    server = psc_rpc_server_create("127.0.0.1:0", 2, err, sizeof err);
    if (!server) return -1;
    psc_rpc_server_add_method(server, M_ECHO, h_echo, NULL);
    psc_rpc_server_add_method_iov(server, M_SUM, h_sum, NULL);
    int port = psc_rpc_server_start(server, err, sizeof err);
    if (port <= 0) return -1;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    psc_rpc_server_destroy(server);
    return 0;
}

static void test_iov_request(void **state)
{
    (void)state;
    psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
    static const size_t sizes[] = {0, 1, 5, 4096, 100003, (size_t)7 << 20};
    for (size_t k = 0; k < PSC_ARRAY_LEN(sizes); k++) {
        size_t n = sizes[k];
        uint8_t *msg = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) msg[i] = (uint8_t)(i * 131 + k);
        psc_rpc_op_t op;
        assert_int_equal(psc_rpc_call(ch, M_SUM, msg, n, 10000, 1, &op), 0);
        assert_int_equal(op.reply_len, 32);
        uint64_t got[4];
        memcpy(got, op.reply, sizeof got);
        assert_true(got[0] == n);
        assert_true(got[1] == fnv(14695981039346656037ULL, msg, n));
        if (n > 1) assert_true(got[3] == fnv(14695981039346656037ULL, msg + 1, n - 1));
        if (n == sizes[PSC_ARRAY_LEN(sizes) - 1]) {
            print_message("a %zu-byte request arrived in %llu slices\n", n, (unsigned long long)got[2]);
            assert_true(got[2] > 64); /* the slice array grew past its stack part */
        }
        psc_rpc_op_clear(&op);
        /* the copying path answers the same bytes */
        assert_int_equal(psc_rpc_call(ch, M_ECHO, msg, n, 10000, 1, &op), 0);
        assert_int_equal(op.reply_len, n);
        if (n) assert_memory_equal(op.reply, msg, n);
        psc_rpc_op_clear(&op);
        free(msg);
    }
    psc_rpc_channel_destroy(ch);
}

static void *caller(void *arg)
{
    int *failures = arg;
    for (int round = 0; round < 8; round++) {
        psc_rpc_channel_t *ch = psc_rpc_channel_create(addr);
        char msg[32];
        int n = snprintf(msg, sizeof msg, "round %d", round);
        psc_rpc_op_t op;
        if (psc_rpc_call(ch, M_ECHO, msg, (size_t)n, 10000, 1, &op) != 0 || op.reply_len != (size_t)n ||
            memcmp(op.reply, msg, (size_t)n) != 0)
            (*failures)++;
        psc_rpc_op_clear(&op);
        psc_rpc_channel_destroy(ch);
    }
    return NULL;
}

static void test_channels_from_many_threads(void **state)
{
    (void)state;
    enum { T = 16 };
    pthread_t th[T];
    int failures[T] = {0};
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < T; i++) assert_int_equal(pthread_create(&th[i], NULL, caller, &failures[i]), 0);
        for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    }
    for (int i = 0; i < T; i++) assert_int_equal(failures[i], 0);
}

static void test_failure_codes(void **state)
{
    (void)state;
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_UNAVAILABLE), PSC_EUNAVAILABLE);
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_CANCELLED), PSC_EUNAVAILABLE);
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_ABORTED), PSC_EUNAVAILABLE);
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_DEADLINE_EXCEEDED), PSC_ETIMEOUT);
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_FAILED_PRECONDITION), PSC_ENOTREADY);
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_INVALID_ARGUMENT), PSC_EINVAL);
    assert_int_equal(psc_rpc_code_errno(PSC_RPC_UNAUTHENTICATED), PSC_EPERM);
    assert_int_equal(psc_rpc_code_errno(99), PSC_ERPC);
    /* every code a psc daemon sends survives a relay through another daemon
     * (the chief relaying a PS's refusal to psctl) */
    static const int sent[] = {PSC_RPC_NOT_FOUND,          PSC_RPC_FAILED_PRECONDITION, PSC_RPC_ALREADY_EXISTS,
                               PSC_RPC_INVALID_ARGUMENT,   PSC_RPC_RESOURCE_EXHAUSTED,  PSC_RPC_DATA_LOSS,
                               PSC_RPC_INTERNAL,           PSC_RPC_UNAVAILABLE,         PSC_RPC_DEADLINE_EXCEEDED,
                               PSC_RPC_UNAUTHENTICATED};
    for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++)
        assert_int_equal(psc_rpc_status_of(psc_rpc_code_errno(sent[i])), sent[i]);
    assert_int_equal(psc_rpc_status_of(PSC_ESTALE), PSC_RPC_ABORTED);
    assert_int_equal(psc_rpc_status_of(PSC_EMISMATCH), PSC_RPC_INVALID_ARGUMENT);

    psc_rpc_op_t ops[4];
    memset(ops, 0, sizeof ops);
    assert_int_equal(psc_rpc_first_failure(ops, 4), 4); /* all OK */
    ops[1].code = PSC_RPC_INVALID_ARGUMENT;
    ops[3].code = PSC_RPC_CANCELLED;
    assert_int_equal(psc_rpc_first_failure(ops, 4), 3); /* the server going away explains the rest */
    ops[3].code = PSC_RPC_NOT_FOUND;
    assert_int_equal(psc_rpc_first_failure(ops, 4), 1); /* else the first failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_iov_request),
        cmocka_unit_test(test_channels_from_many_threads),
        cmocka_unit_test(test_failure_codes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
