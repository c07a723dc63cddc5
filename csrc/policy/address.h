#ifndef SANDSTACK_POLICY_ADDRESS_H
#define SANDSTACK_POLICY_ADDRESS_H
/* The address ranges egress never reaches unless a policy names the address (docs/policy.md,
 * "Refused addresses"): the proxy resolves names itself and connects to the address it checked,
 * so a name that an attacker re-points (DNS rebinding) at the host, the metadata service or a
 * private network is refused (decision "address_refused") unless the policy names that address
 * (ss_policy_names_address: its allow_private, or a rule naming the literal on the connection's
 * port). An IPv6 address that carries an IPv4 address (mapped, SIIT, NAT64 well-known and
 * local-use, IPv4-compatible, 6to4, Teredo) is judged as the IPv4 address it carries. */
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

/* NULL when the address is an ordinary destination, else the name of the range it lies in
 * ("loopback", "link_local", "private", "shared", "unique_local", "multicast", "this_network",
 * "reserved", "unspecified"). */
const char *ss_address_range(const struct sockaddr *sa);
/* Text form (no port) into out (INET6_ADDRSTRLEN bytes): the canonical form policies name. */
void ss_address_text(const struct sockaddr *sa, char *out, size_t cap);
/* The address that text (no port) spells in its canonical form (a dotted quad as inet_ntop
 * writes it, an IPv6 address as inet_ntop writes it) into *out; -1 for anything else. */
int ss_address_parse(const char *text, struct sockaddr_storage *out);

#endif
