/* MORI-SHMEM's proxy in morid: serves the proxy ring of every PE of this node, so that
 * GPU kernels (and anything else writing a PE's ring, common/shmem_layout.h) reach PEs this PE
 * does not map: PEs behind another morid (over the daemons' transports: the bytes as a transfer
 * between the two heap regions, signals and atomics as PeerShmemAmo messages the target daemon
 * applies), and PEs of this node (copies between the heap regions through morid's own access).
 *
 * A layer above group.c: it learns of PEs through group_set_hooks (pe_ready, pe_gone) and finds
 * rings, heaps and peers through group_pe / group_peer. Everything runs on the daemon's loop. */
#ifndef MORID_SHMEM_PROXY_H
#define MORID_SHMEM_PROXY_H
#include "core/morid.h"

int shmem_proxy_start(struct morid *d);
void shmem_proxy_stop(struct morid *d);
#endif
