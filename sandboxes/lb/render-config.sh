#!/bin/sh
# Render /tmp/haproxy.cfg from haproxy.cfg.in and AGENTRL_LB_REPLICAS ("name=host:port ..."), then exec
# HAProxy in the foreground. Each replica becomes a server of the round-robin backend `replicas` and a
# backend of its own (named like the server, its health tracked from `replicas`) that requests of its
# sessions are pinned to.
set -eu
template=/etc/agentrl-lb/haproxy.cfg.in
config=/tmp/haproxy.cfg
map=/etc/agentrl-lb/sessions.map
[ -n "${AGENTRL_LB_REPLICAS:-}" ] || { echo "lb: AGENTRL_LB_REPLICAS is empty" >&2; exit 2; }
cp "$template" "$config"
for replica in $AGENTRL_LB_REPLICAS; do
    echo "    server ${replica%%=*} ${replica#*=} check" >>"$config"
done
for replica in $AGENTRL_LB_REPLICAS; do
    name="${replica%%=*}"
    cat >>"$config" <<BACKEND

backend $name
    http-response del-map($map) %[var(txn.session)] if { res.hdr(x-agentrl-tree-sessions) -m str 0 }
    http-response del-map($map) %[var(txn.session)] if { var(txn.method) -m str DELETE } !{ res.hdr(x-agentrl-tree-sessions) -m found } || { status 404 } !{ res.hdr(x-agentrl-tree-sessions) -m found }
    server $name ${replica#*=} track replicas/$name
BACKEND
done
haproxy -c -q -f "$config"
exec haproxy -db -f "$config"
