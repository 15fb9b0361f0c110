/* security.c — see security.h. OpenSSL checks the PEM files at start; gRPC's
 * own TLS (BoringSSL/OpenSSL underneath) does the handshakes. */
#include "security.h"

#include "log.h"
#include "psc.h"
#include "rpc.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PEM_MAX_BYTES ((size_t)1 << 20)
#define TOKEN_MIN 16
#define TOKEN_MAX 4096

int psc_security_flag(int opt, const char *arg, psc_security_flags_t *f)
{
    switch (opt) {
    case PSC_OPT_TLS_CERT: f->tls_cert = arg; return 1;
    case PSC_OPT_TLS_KEY: f->tls_key = arg; return 1;
    case PSC_OPT_TLS_CA: f->tls_ca = arg; return 1;
    case PSC_OPT_TLS_CLIENT_AUTH: f->tls_client_auth = 1; return 1;
    case PSC_OPT_TLS_SERVER_NAME: f->tls_server_name = arg; return 1;
    case PSC_OPT_AUTH_TOKEN_FILE: f->auth_token_file = arg; return 1;
    default: return 0;
    }
}

static char *read_pem(const char *flag, const char *path, char *err, size_t errlen)
{
    char *text = psc_read_file(path, PEM_MAX_BYTES, NULL);
    if (!text) psc_seterr(err, errlen, PSC_ECONFIG, "%s %s: cannot read: %s", flag, path, strerror(errno));
    return text;
}

/* The first certificate of a PEM text, or NULL with err naming the flag. */
static X509 *first_cert(const char *flag, const char *path, const char *pem, char *err, size_t errlen)
{
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *x = b ? PEM_read_bio_X509(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (!x) psc_seterr(err, errlen, PSC_ECONFIG, "%s %s: no PEM certificate in it", flag, path);
    return x;
}

static int check_not_expired(const char *flag, const char *path, X509 *x, char *err, size_t errlen)
{
    if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s %s: the certificate has expired", flag, path);
    if (X509_cmp_current_time(X509_get0_notBefore(x)) > 0)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s %s: the certificate is not valid yet", flag, path);
    return 0;
}

/* Certificate and key parse and belong together. */
static int check_pair(const psc_security_flags_t *f, const char *cert_pem, const char *key_pem, char *err,
                      size_t errlen)
{
    X509 *x = first_cert("--tls_cert", f->tls_cert, cert_pem, err, errlen);
    if (!x) return PSC_ECONFIG;
    int rc = check_not_expired("--tls_cert", f->tls_cert, x, err, errlen);
    BIO *b = BIO_new_mem_buf(key_pem, -1);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, NULL) : NULL;
    BIO_free(b);
    if (!rc && !k)
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "--tls_key %s: no unencrypted PEM private key in it", f->tls_key);
    if (!rc && X509_check_private_key(x, k) != 1)
        rc = psc_seterr(err, errlen, PSC_ECONFIG, "--tls_key %s is not the key of --tls_cert %s", f->tls_key,
                        f->tls_cert);
    EVP_PKEY_free(k);
    X509_free(x);
    ERR_clear_error();
    return rc;
}

char *psc_security_read_token(const char *path, char *err, size_t errlen)
{
    char *t = psc_read_file(path, TOKEN_MAX + 2, NULL);
    if (!t) {
        psc_seterr(err, errlen, PSC_ECONFIG, "--auth_token_file %s: cannot read: %s", path,
                   errno == EFBIG ? "longer than 4096 characters" : strerror(errno));
        return NULL;
    }
    size_t n = strlen(t);
    if (n && t[n - 1] == '\n') t[--n] = '\0';
    if (n && t[n - 1] == '\r') t[--n] = '\0';
    const char *why = NULL;
    for (size_t i = 0; i < n && !why; i++)
        if (t[i] < 0x21 || t[i] > 0x7e) why = "has a character that is not visible ASCII (a space, a second line?)";
    if (!why && n < TOKEN_MIN) why = "is shorter than 16 characters (make one with: openssl rand -hex 32)";
    if (!why && n > TOKEN_MAX) why = "is longer than 4096 characters";
    if (why) {
        psc_seterr(err, errlen, PSC_ECONFIG, "--auth_token_file %s: the token %s", path, why);
        explicit_bzero(t, n);
        free(t);
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 0077))
        PSC_WARN("--auth_token_file %s can be read by other users (chmod 600 it)", path);
    return t;
}

int psc_security_apply(const psc_security_flags_t *f, enum psc_security_role role, char *err, size_t errlen)
{
    if (!f->tls_cert != !f->tls_key)
        return psc_seterr(err, errlen, PSC_ECONFIG, "%s needs %s as well", f->tls_cert ? "--tls_cert" : "--tls_key",
                          f->tls_cert ? "--tls_key" : "--tls_cert");
    if (f->tls_client_auth && role == PSC_SEC_CLIENT)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "--tls_client_auth is for servers; a client presents --tls_cert/--tls_key when asked");
    if (f->tls_client_auth && (!f->tls_ca || !f->tls_cert))
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "--tls_client_auth needs --tls_cert/--tls_key (the server's) and --tls_ca (to verify clients)");
    if (role == PSC_SEC_SERVER && f->tls_ca && !f->tls_cert)
        return psc_seterr(err, errlen, PSC_ECONFIG, "--tls_ca without --tls_cert/--tls_key: the listener has no certificate");
    if (role == PSC_SEC_BOTH && !f->tls_cert != !f->tls_ca)
        return psc_seterr(err, errlen, PSC_ECONFIG,
                          "a worker both listens and connects over TLS: give --tls_cert, --tls_key and --tls_ca together");
    if (f->tls_server_name && !f->tls_ca && !f->tls_cert)
        return psc_seterr(err, errlen, PSC_ECONFIG, "--tls_server_name needs TLS (--tls_ca)");

    char *cert = NULL, *key = NULL, *ca = NULL, *token = NULL;
    int rc = 0;
    if (f->tls_cert) {
        cert = read_pem("--tls_cert", f->tls_cert, err, errlen);
        key = cert ? read_pem("--tls_key", f->tls_key, err, errlen) : NULL;
        rc = !cert || !key ? PSC_ECONFIG : check_pair(f, cert, key, err, errlen);
    }
    if (!rc && f->tls_ca) {
        ca = read_pem("--tls_ca", f->tls_ca, err, errlen);
        X509 *x = ca ? first_cert("--tls_ca", f->tls_ca, ca, err, errlen) : NULL;
        rc = x ? check_not_expired("--tls_ca", f->tls_ca, x, err, errlen) : PSC_ECONFIG;
        X509_free(x);
    }
    if (!rc && f->auth_token_file) {
        token = psc_security_read_token(f->auth_token_file, err, errlen);
        if (!token) rc = PSC_ECONFIG;
    }
    if (!rc) {
        psc_rpc_security_t s = {cert, key, ca, f->tls_client_auth, f->tls_server_name, token};
        psc_rpc_set_security(&s);
        if ((cert || ca) && role != PSC_SEC_CLIENT)
            PSC_INFO("TLS on%s%s", f->tls_client_auth ? ", client certificates required" : "",
                     cert && role != PSC_SEC_SERVER ? ", presenting --tls_cert to servers" : "");
        if (token && role != PSC_SEC_CLIENT)
            PSC_INFO("auth token from %s: %s", f->auth_token_file,
                     role == PSC_SEC_SERVER ? "every call must carry it"
                                            : "sent with every call, and every call to this task must carry it");
    }
    if (key) explicit_bzero(key, strlen(key));
    if (token) explicit_bzero(token, strlen(token));
    free(cert);
    free(key);
    free(ca);
    free(token);
    return rc;
}
