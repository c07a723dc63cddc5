#ifndef SANDSTACK_PROXY_CA_H
#define SANDSTACK_PROXY_CA_H
/* The stack's inspection CA. The proxy makes it at start, in its own memory: the
 * private key is never written anywhere, so it cannot leave the proxy's container and dies
 * with the process. Only the certificate is written (ca_write_files), for the sandbox to trust.
 * The certificate is short-lived and carries X.509 name constraints that permit exactly the
 * hosts the policy sends to inspection (rules with methods or paths), so even a leaked key
 * could not vouch for any other name. Leaf certificates are issued per host on first use and
 * cached (one leaf key for all of them: what the cache saves is the signing). */
#include <openssl/x509.h>
#include <stddef.h>

#include "policy/policy.h"
#include "proxy/parse/cred_table.h"

typedef struct proxy_ca proxy_ca;

/* Whether a rule can only be enforced by reading the requests: it names methods or paths. */
int ca_rule_needs_inspection(const ss_policy_rule *r);
/* Whether any rule of p does (then the proxy needs a CA to serve it). */
int ca_policy_needs_inspection(const ss_policy *p);

/* The name constraints for p, OpenSSL's config syntax ("critical,permitted;DNS:a.test,...").
 * Hosts are the rules' hosts (a wildcard's apex: RFC 5280 DNS constraints have no
 * subdomains-only form), and every credential's host (creds may be NULL: a credential's host
 * is always inspected); IP addresses are permitted one by one, or all excluded. Caller frees. */
char *ca_name_constraints(const ss_policy *p, const proxy_creds *creds);

/* A new CA valid from an hour ago (clock skew) for `hours`. NULL with the reason in why. */
proxy_ca *ca_create(const ss_policy *p, const proxy_creds *creds, unsigned hours, size_t cache_max, char *why, size_t why_len);
void ca_free(proxy_ca *ca);

/* Writes DIR/ca.pem (the CA certificate) and DIR/bundle.pem (every certificate of roots_file,
 * then the extra upstream roots (SANDSTACK_UPSTREAM_CA, NULL for none), then the CA; with ca
 * NULL no CA), each by rename so a reader never sees half a file. The extras are in the bundle
 * because a tunnelled host is verified by the sandbox itself: a private upstream's root must be
 * trusted there as well as here. 0, or -1 with the reason in why. */
int ca_write_files(const proxy_ca *ca, const STACK_OF(X509) *extra, const char *dir, const char *roots_file, char *why,
                   size_t why_len);

/* The leaf certificate for host (a DNS name or an IPv4 literal), from the cache or signed now
 * (*fresh = 1). The certificate stays owned by the cache: take a reference (SSL_use_certificate
 * does) before the next call. NULL when signing failed. */
X509 *ca_leaf(proxy_ca *ca, const char *host, int *fresh);
EVP_PKEY *ca_leaf_key(const proxy_ca *ca);

#endif
