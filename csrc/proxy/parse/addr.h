#ifndef SANDSTACK_PROXY_ADDR_H
#define SANDSTACK_PROXY_ADDR_H
/* Which resolved addresses the proxy refuses to connect to, whatever name led there: the proxy
 * resolves names itself and connects to the address it checked, so a name that an attacker
 * re-points (DNS rebinding) at the host, the metadata service or a private network is refused
 * (decision "address_refused") unless a rule names that literal address on the connection's port
 * (ss_policy_names_address). An IPv6 address that carries an IPv4 address (mapped, SIIT, NAT64
 * well-known and local-use, IPv4-compatible, 6to4, Teredo) is judged as the IPv4 address it
 * carries. */
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

/* NULL when the address is an ordinary destination, else the name of the range it lies in
 * ("loopback", "link_local", "private", "shared", "unique_local", "multicast", "this_network",
 * "reserved", "unspecified"). */
const char *addr_refused_range(const struct sockaddr *sa);
/* Text form (no port) into out (INET6_ADDRSTRLEN bytes). */
void addr_text(const struct sockaddr *sa, char *out, size_t cap);

#endif
