/* psc_free_port — prints N distinct free TCP ports on 127.0.0.1 (default 1),
 * one per line, found by binding to port 0. The sockets are held until all N are
 * picked, so the ports differ; a later bind can still race, which the tests
 * accept (they retry on "cannot bind"). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > 256) {
        fprintf(stderr, "usage: psc_free_port [N]   (1..256)\n");
        return 64;
    }
    int fds[256];
    for (int i = 0; i < n; i++) {
        struct sockaddr_in a = {0};
        socklen_t len = sizeof a;
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &len) != 0) {
            perror("psc_free_port");
            return 1;
        }
        printf("%d\n", ntohs(a.sin_port));
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    return 0;
}
