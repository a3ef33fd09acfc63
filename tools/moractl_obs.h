/* moractl's commands of issue 19 (moractl_obs.c): topo, diagnose, metrics. Each returns
 * moractl's exit code; diagnose's is 1 when any check found a problem (or no daemon answered),
 * else 0 (warnings included). */
#ifndef MORACTL_OBS_H
#define MORACTL_OBS_H
int moractl_topo(const char *url, int timeout_ms, int json);
int moractl_diagnose(const char *url, int timeout_ms, int json);
int moractl_metrics(const char *url, int timeout_ms, int json);
#endif
