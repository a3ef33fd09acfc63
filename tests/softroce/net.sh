#!/bin/bash
# Inside the VM (as root, chrooted in the host root): two Soft-RoCE devices joined by a veth
# pair, rxe0 on v0 (192.168.77.1) and rxe1 on v1 (192.168.77.2).
set -eu
ip link set lo up
ip link add v0 mtu 9000 type veth peer name v1 mtu 9000
ip addr add 192.168.77.1/24 dev v0
ip addr add 192.168.77.2/24 dev v1
ip link set v0 up
ip link set v1 up
# Both addresses are this host's, so the kernel would deliver .1 -> .2 through lo, and rxe only
# sees packets that arrive on its own netdev. Route locally sent packets for the other end out
# of the veth (policy rules ahead of the local table), and accept packets from a local source.
for k in all v0 v1; do
	echo 1 > /proc/sys/net/ipv4/conf/$k/accept_local
	echo 0 > /proc/sys/net/ipv4/conf/$k/rp_filter
done
echo 1 > /proc/sys/net/ipv4/conf/all/arp_ignore
echo 2 > /proc/sys/net/ipv4/conf/all/arp_announce
ip rule add pref 100 to 192.168.77.2 iif lo lookup 100
ip rule add pref 101 to 192.168.77.1 iif lo lookup 101
ip rule add pref 500 lookup local
ip rule del pref 0
ip route add 192.168.77.2 dev v0 src 192.168.77.1 table 100
ip route add 192.168.77.1 dev v1 src 192.168.77.2 table 101
rdma link add rxe0 type rxe netdev v0
rdma link add rxe1 type rxe netdev v1
# RoCEv2 GIDs appear once the addresses are seen by the rxe devices
for i in $(seq 50); do
	grep -q ffff:c0a8:4d01 /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null && break
	sleep 0.1
done
