#!/bin/sh
# Writes the nginx configuration (resolver from resolv.conf, listen port) and runs nginx.
#   SANDSTACK_PROXY_PORT (default 8080), SANDSTACK_RESOLVER (default: first nameserver)
set -eu
port=${SANDSTACK_PROXY_PORT:-8080}
resolver=${SANDSTACK_RESOLVER:-$(awk '/^nameserver/ { print $2; exit }' /etc/resolv.conf 2>/dev/null || true)}
[ -n "$resolver" ] || resolver=127.0.0.11
case "$resolver" in *:*) resolver="[$resolver]" ;; esac
case "$port" in '' | *[!0-9]*) echo "SANDSTACK_PROXY_PORT must be a number" >&2; exit 64 ;; esac
mkdir -p /tmp/nginx-body /tmp/nginx-proxy /tmp/nginx-fastcgi /tmp/nginx-uwsgi /tmp/nginx-scgi
sed -e "s/@RESOLVER@/$resolver/" -e "s/@PORT@/$port/" /etc/sandstack-proxy/nginx.conf.in >/tmp/nginx.conf
exec /usr/sbin/nginx -c /tmp/nginx.conf -e stderr
