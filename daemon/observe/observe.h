/* Control replies of moractl topo, diagnose and metrics (observe.c). */
#ifndef MORID_OBSERVE_H
#define MORID_OBSERVE_H
#include "core/morid.h"

void observe_topo(struct morid *d, Mori__Reply *rep, struct rctx *r);
void observe_diagnose(struct morid *d, Mori__Reply *rep, struct rctx *r);
void observe_metrics(struct morid *d, Mori__Reply *rep, struct rctx *r);
#endif
