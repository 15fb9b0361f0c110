/* it_util.h — helpers for the C integration tests: start real daemons from the
 * build directory (PSC_BIN) on free loopback ports, wait for their health
 * service, stop them, and show their logs when a test fails. Header-only. */
#ifndef PSC_IT_UTIL_H
#define PSC_IT_UTIL_H

#include "rpc.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

typedef struct it_proc {
    pid_t pid;
    char log[256];
    char addr[64];
} it_proc_t;

static inline int it_free_port(void)
{
    struct sockaddr_in a = {0};
    socklen_t len = sizeof a;
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) abort();
    int port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static inline const char *it_bin(void)
{
    const char *b = getenv("PSC_BIN");
    return b ? b : ".";
}

/* Starts PSC_BIN/prog with argv (NULL-terminated, without argv[0]); stdout and
 * stderr go to a log file in /tmp. */
static inline int it_spawn(it_proc_t *p, const char *prog, char *const *args)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", it_bin(), prog);
    static int seq; /* two daemons started in one second get two logs */
    snprintf(p->log, sizeof p->log, "/tmp/psc-it-%s-%d-%ld-%d.log", prog, (int)getpid(), (long)time(NULL), seq++);
    char *argv[64];
    int n = 0;
    argv[n++] = path;
    for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
    argv[n] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, p->log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    int rc = posix_spawn(&p->pid, path, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

/* Waits until 127.0.0.1:port accepts a TCP connection (at most ms). A health
 * check sent before the daemon listens is refused, and gRPC then reconnects
 * only after its backoff while some call polls: up to 10 s in a process that
 * already holds other channels. */
static inline int it_wait_port(int port, int ms)
{
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    for (int waited = 0; waited < ms; waited += 20) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) return 0;
        usleep(20000);
    }
    return -1;
}

/* Starts a ps_server alone in a 1-ps cluster and waits for it: on p->addr
 * when `reuse` (a restart on the same port), else on a free port; with
 * --checkpoint_dir ckpt_dir when not NULL. */
static inline int it_start_ps_ex(it_proc_t *p, int reuse, const char *ckpt_dir)
{
    if (!reuse) snprintf(p->addr, sizeof p->addr, "127.0.0.1:%d", it_free_port());
    int port = atoi(strrchr(p->addr, ':') + 1);
    char cluster[128];
    snprintf(cluster, sizeof cluster, "{\"ps\": [\"%s\"]}", p->addr);
    char *args[] = {"--cluster", cluster, "--job", "ps", "--task_index", "0", NULL, NULL, NULL};
    if (ckpt_dir) {
        args[6] = "--checkpoint_dir";
        args[7] = (char *)ckpt_dir;
    }
    if (it_spawn(p, "ps_server", args)) return -1;
    if (it_wait_port(port, 10000)) return -1;
    psc_rpc_channel_t *ch = psc_rpc_channel_create(p->addr);
    int ok = 0;
    for (int i = 0; i < 200 && !ok; i++) {
        ok = psc_rpc_health_check(ch, 200);
        if (!ok) usleep(50000);
    }
    psc_rpc_channel_destroy(ch);
    return ok ? 0 : -1;
}

/* Starts a ps_server alone in a 1-ps cluster on a free port and waits for it. */
static inline int it_start_ps(it_proc_t *p) { return it_start_ps_ex(p, 0, NULL); }

static inline void it_dump_log(const it_proc_t *p)
{
    FILE *f = fopen(p->log, "r");
    if (!f) return;
    fprintf(stderr, "---- %s ----\n", p->log);
    char line[1024];
    while (fgets(line, sizeof line, f)) fputs(line, stderr);
    fclose(f);
}

/* Sends SIGTERM, waits up to 10 s, returns the exit status (or -1 if it had to be killed). */
static inline int it_stop(it_proc_t *p)
{
    if (p->pid <= 0) return -1;
    kill(p->pid, SIGTERM);
    int status = 0;
    for (int i = 0; i < 200; i++) {
        if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
            p->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(50000);
    }
    kill(p->pid, SIGKILL);
    waitpid(p->pid, &status, 0);
    p->pid = 0;
    return -1;
}

#endif
