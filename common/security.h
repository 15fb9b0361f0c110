/* security.h — the TLS and token flags every program shares.
 *
 *   --tls_cert FILE        this process's certificate chain (PEM): the listener's
 *                          certificate, and the client certificate it presents
 *   --tls_key FILE         the private key of --tls_cert (PEM)
 *   --tls_ca FILE          CA certificates (PEM) that verify the other side: the
 *                          servers this process connects to, and with
 *                          --tls_client_auth the clients of its listener
 *   --tls_client_auth      the listener requires a client certificate signed by --tls_ca
 *   --tls_server_name NAME the name the servers' certificates must carry, instead of
 *                          each address's host
 *   --auth_token_file FILE a shared token (one line, 16..4096 visible ASCII
 *                          characters): sent with every call, required of every
 *                          call by the listener
 *
 * A program parses them with getopt_long (PSC_SECURITY_OPTIONS in its option
 * table, psc_security_flag() in its switch), then calls psc_security_apply()
 * once before it creates any RPC server or channel. The files are read and
 * checked there (a key that does not match its certificate, an expired
 * certificate, a token with spaces), so a mistake stops the program at start
 * with a message naming the flag instead of failing every handshake later.
 * The token is never logged or printed.
 */
#ifndef PSC_SECURITY_H
#define PSC_SECURITY_H

#include <stddef.h>

/* getopt_long values: above daemon.h's PSC_OPT_* and the programs' own
 * (which number from PSC_OPT__FIRST_PROGRAM, below 1100). */
enum {
    PSC_OPT_TLS_CERT = 1100,
    PSC_OPT_TLS_KEY,
    PSC_OPT_TLS_CA,
    PSC_OPT_TLS_CLIENT_AUTH,
    PSC_OPT_TLS_SERVER_NAME,
    PSC_OPT_AUTH_TOKEN_FILE,
};

/* Entries for a struct option table (needs <getopt.h>). */
#define PSC_SECURITY_OPTIONS                                                    \
    {"tls_cert", required_argument, NULL, PSC_OPT_TLS_CERT},                    \
        {"tls_key", required_argument, NULL, PSC_OPT_TLS_KEY},                  \
        {"tls_ca", required_argument, NULL, PSC_OPT_TLS_CA},                    \
        {"tls_client_auth", no_argument, NULL, PSC_OPT_TLS_CLIENT_AUTH},        \
        {"tls_server_name", required_argument, NULL, PSC_OPT_TLS_SERVER_NAME}, \
        {"auth_token_file", required_argument, NULL, PSC_OPT_AUTH_TOKEN_FILE}

/* Usage lines, for the programs' --help. */
#define PSC_SECURITY_USAGE                                                                           \
    "  --tls_cert FILE      TLS: this process's certificate chain (PEM), for its listener and as\n" \
    "                       its client certificate\n"                                                \
    "  --tls_key FILE       TLS: the private key of --tls_cert (PEM)\n"                              \
    "  --tls_ca FILE        TLS: CA certificates (PEM) that verify the servers it connects to (and,\n" \
    "                       with --tls_client_auth, its clients); turns TLS on for its connections\n" \
    "  --tls_client_auth    TLS: the listener requires client certificates signed by --tls_ca\n"     \
    "  --tls_server_name N  TLS: the name the servers' certificates carry (default: each address's host)\n" \
    "  --auth_token_file F  a shared token: sent with every call; the listener refuses calls without\n" \
    "                       it (UNAUTHENTICATED). One line of 16..4096 visible ASCII characters\n"

/* What a program does with the network: only listen (ps_server), only
 * connect (psctl, tools), or both (worker). */
enum psc_security_role { PSC_SEC_SERVER, PSC_SEC_CLIENT, PSC_SEC_BOTH };

typedef struct psc_security_flags {
    const char *tls_cert, *tls_key, *tls_ca, *tls_server_name, *auth_token_file;
    int tls_client_auth;
} psc_security_flags_t;

/* If opt is one of the security options, stores arg and returns 1; else 0. */
int psc_security_flag(int opt, const char *arg, psc_security_flags_t *f);

/* Reads and checks the files and sets the RPC layer's security
 * (psc_rpc_set_security). 0, or PSC_ECONFIG with a message naming the flag. */
int psc_security_apply(const psc_security_flags_t *f, enum psc_security_role role, char *err, size_t errlen);

/* Reads a token file as --auth_token_file does (trailing newline dropped, the
 * rules above checked): a heap string the caller frees, or NULL with err set. */
char *psc_security_read_token(const char *path, char *err, size_t errlen);

#endif
