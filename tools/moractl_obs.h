/* moractl's observability commands (moractl_obs.c): topo, diagnose, metrics. Each returns
 * moractl's exit code; diagnose's is 1 when any check found a problem (or no daemon answered),
 * else 0 (warnings included). */
#ifndef MORACTL_OBS_H
#define MORACTL_OBS_H
#include <cJSON.h>
#include <stddef.h>

#include "mori.pb-c.h"

int moractl_topo(const char *url, int timeout_ms, int json);
int moractl_diagnose(const char *url, int timeout_ms, int json);
int moractl_metrics(const char *url, int timeout_ms, int json);
/* moractl kv (moractl_kv.c): the KV store's state; 1 when morid did not answer or has no store. */
int moractl_kv(const char *url, int timeout_ms, int json);

/* Shared by moractl.c (which defines them) and moractl_obs.c. */
/* req to the daemon at url within timeout_ms; its reply (the caller frees it) when that is code
 * 0 with the body body, else NULL with the reason in err. */
Mori__Reply *moractl_ask(const char *url, int timeout_ms, const Mori__Request *req, int body, char *err,
			 size_t len);
/* Print o as cJSON lays it out, and free it. */
void moractl_print_json(cJSON *o);
/* Add m's fields to o under their proto names, in the order of names (space-separated; "key=field"
 * where the JSON name differs). 64-bit numbers are JSON numbers (doubles). A name m lacks is
 * moractl's own bug: abort. */
void moractl_json_fields(cJSON *o, const ProtobufCMessage *m, const char *names);
/* A new object of m's fields (moractl_json_fields), appended to the array arr; it is arr's. */
cJSON *moractl_json_row(cJSON *arr, const ProtobufCMessage *m, const char *names);
#endif
