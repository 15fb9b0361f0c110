/* psc_badclient — a misbehaving client, for the tests that check one cannot
 * block the others. Against ADDR, for SECS seconds, it keeps:
 *  - IDLE TCP connections that never send a byte (a stuck or hostile peer that
 *    holds connections open);
 *  - SLOW streams, 8 per connection: a valid HTTP/2 preface and a gRPC call
 *    (HEADERS for /psc.ParameterServer/Push) whose message announces 4 MiB and
 *    then arrives one byte per stream per second.
 * It reads and discards whatever the server sends. At the end it prints one
 * line: "idle: N open, M closed by the server (first after S s, last after T s);
 * slow: K connections, J still open, R streams reset" (RST_STREAM frames the
 * server sent).
 * usage: psc_badclient HOST:PORT IDLE SLOW SECS      (IPv4 host) exit 0, 64 usage, 69 cannot connect */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define STREAMS_PER_CONN 8

typedef struct conn {
    int fd;
    int slow;         /* carries slow streams */
    double closed_at; /* seconds after start when the server closed it; 0 open */
    int resets;       /* RST_STREAM frames received */
    uint8_t hdr[9];   /* frame parser of what the server sends: the header so far */
    size_t hdr_have;
    size_t skip;      /* payload bytes of the current frame still to skip */
} conn_t;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int dial(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) != 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

static size_t frame(uint8_t *p, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
    p[0] = (uint8_t)(len >> 16);
    p[1] = (uint8_t)(len >> 8);
    p[2] = (uint8_t)len;
    p[3] = type;
    p[4] = flags;
    p[5] = (uint8_t)(stream >> 24 & 0x7f);
    p[6] = (uint8_t)(stream >> 16);
    p[7] = (uint8_t)(stream >> 8);
    p[8] = (uint8_t)stream;
    return 9;
}

/* HPACK "literal header field without indexing, new name", no Huffman. */
static size_t literal(uint8_t *p, const char *name, const char *value)
{
    size_t n = strlen(name), v = strlen(value), o = 0;
    p[o++] = 0x00;
    p[o++] = (uint8_t)n;
    memcpy(p + o, name, n);
    o += n;
    p[o++] = (uint8_t)v;
    memcpy(p + o, value, v);
    return o + v;
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EAGAIN) {
            struct pollfd q = {fd, POLLOUT, 0};
            poll(&q, 1, 100);
        } else {
            return; /* closed: noticed by the reader */
        }
    }
}

/* Preface, empty SETTINGS, an ACK of the server's, then the streams' HEADERS
 * and the gRPC message prefix announcing 4 MiB. */
static void start_slow(int fd)
{
    uint8_t buf[4096];
    size_t o = 0;
    memcpy(buf, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
    o = 24;
    o += frame(buf + o, 0, 0x4, 0, 0);
    o += frame(buf + o, 0, 0x4, 0x1, 0);
    for (uint32_t s = 0; s < STREAMS_PER_CONN; s++) {
        uint32_t id = 1 + 2 * s;
        uint8_t hb[512];
        size_t h = 0;
        h += literal(hb + h, ":method", "POST");
        h += literal(hb + h, ":scheme", "http");
        h += literal(hb + h, ":path", "/psc.ParameterServer/Push");
        h += literal(hb + h, ":authority", "psc");
        h += literal(hb + h, "content-type", "application/grpc");
        h += literal(hb + h, "te", "trailers");
        o += frame(buf + o, (uint32_t)h, 0x1, 0x4, id);
        memcpy(buf + o, hb, h);
        o += h;
        uint8_t prefix[5] = {0, 0x00, 0x40, 0x00, 0x00}; /* uncompressed, 4 MiB */
        o += frame(buf + o, 5, 0x0, 0, id);
        memcpy(buf + o, prefix, 5);
        o += 5;
    }
    send_all(fd, buf, o);
}

/* Reads what the server sent, counting RST_STREAM frames; returns 0 when the
 * connection closed. */
static int drain(conn_t *c)
{
    uint8_t buf[65536];
    for (;;) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r == 0) return 0;
        if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : 0;
        for (size_t i = 0; i < (size_t)r;) {
            if (c->skip) {
                size_t k = (size_t)r - i < c->skip ? (size_t)r - i : c->skip;
                c->skip -= k;
                i += k;
                continue;
            }
            c->hdr[c->hdr_have++] = buf[i++];
            if (c->hdr_have == 9) {
                c->hdr_have = 0;
                c->skip = (size_t)c->hdr[0] << 16 | (size_t)c->hdr[1] << 8 | c->hdr[2];
                if (c->hdr[3] == 0x3) c->resets++;
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: psc_badclient HOST:PORT IDLE SLOW SECS\n");
        return 64;
    }
    char host[64];
    const char *colon = strrchr(argv[1], ':');
    if (!colon || (size_t)(colon - argv[1]) >= sizeof host) return 64;
    memcpy(host, argv[1], (size_t)(colon - argv[1]));
    host[colon - argv[1]] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "psc_badclient: %s is not an IPv4 address\n", host);
        return 64;
    }
    int nidle = atoi(argv[2]), nslow_streams = atoi(argv[3]);
    double secs = atof(argv[4]);
    int nslow = (nslow_streams + STREAMS_PER_CONN - 1) / STREAMS_PER_CONN, n = nidle + nslow;
    conn_t *c = calloc((size_t)n + 1, sizeof *c);
    double t0 = now();
    for (int i = 0; i < n; i++) {
        c[i].fd = dial(&sa);
        if (c[i].fd < 0) {
            fprintf(stderr, "psc_badclient: connection %d to %s: %s\n", i, argv[1], strerror(errno));
            return 69;
        }
        c[i].slow = i >= nidle;
        if (c[i].slow) start_slow(c[i].fd);
    }
    uint32_t tick = 0;
    while (now() - t0 < secs) {
        for (int i = 0; i < n; i++) {
            if (c[i].closed_at) continue;
            if (!drain(&c[i])) {
                c[i].closed_at = now() - t0;
                close(c[i].fd);
                continue;
            }
            if (c[i].slow) { /* one more byte of each stream's message */
                uint8_t buf[STREAMS_PER_CONN * 10];
                size_t o = 0;
                for (uint32_t s = 0; s < STREAMS_PER_CONN; s++) {
                    o += frame(buf + o, 1, 0x0, 0, 1 + 2 * s);
                    buf[o++] = (uint8_t)tick;
                }
                send_all(c[i].fd, buf, o);
            }
        }
        tick++;
        struct timespec d = {1, 0};
        nanosleep(&d, NULL);
    }
    int idle_closed = 0, slow_open = 0, resets = 0;
    double first = 0, last = 0;
    for (int i = 0; i < n; i++) {
        if (!c[i].slow && c[i].closed_at) {
            if (!idle_closed || c[i].closed_at < first) first = c[i].closed_at;
            if (c[i].closed_at > last) last = c[i].closed_at;
            idle_closed++;
        }
        if (c[i].slow && !c[i].closed_at) slow_open++;
        if (c[i].slow) resets += c[i].resets;
        if (!c[i].closed_at) close(c[i].fd);
    }
    printf("idle: %d open, %d closed by the server (first after %.1f s, last after %.1f s); "
           "slow: %d connections, %d still open, %d streams reset\n",
           nidle - idle_closed, idle_closed, first, last, nslow, slow_open, resets);
    free(c);
    return 0;
}
