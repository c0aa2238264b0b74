/*
 * tenant.h: what each uid holds, for the per-uid limits.
 *
 * Per-client limits stop one connection; a tenant opens as many as it
 * likes, so the limits that keep one tenant from crowding out the others
 * count by uid (from SO_PEERCRED, so nobody can count as someone else):
 *
 *   connections  at most max_clients_per_uid of one uid; and the last
 *                R = min(reserved_clients, max_clients / 2) slots of
 *                max_clients go only to a uid holding fewer than R. One
 *                uid alone can so never hold more than max_clients - R,
 *                and while it holds that (or any number of uids hold R or
 *                more each) a uid with fewer than R can still connect.
 *   footprints   at most max_comms_per_uid over all its connections
 *   CTAs         at most max_comm_ctas_per_uid in flight (ctas x
 *                concurrent, summed) registered on any one GPU
 *
 * A uid is tracked while it has a counted connection; its footprints go
 * with its connections (conn.h), and with them its counts.
 */
#ifndef HR_DAEMON_TENANT_H
#define HR_DAEMON_TENANT_H

#include <stddef.h>

#include "config.h"
#include "hr_proto.h"

typedef struct hr__tenant {
  int uid;
  int conns;                        /* counted toward max_clients */
  int comms;                        /* footprints, all its connections */
  int ctas[HR_MAX_GPUS];            /* CTAs in flight registered per GPU */
} hr__tenant;

typedef struct hr__tenants {
  hr__tenant *v;                    /* unordered; at most one per uid */
  int n, cap;
} hr__tenants;

/* The tenant of `uid`, NULL when it holds nothing. The pointer is good
 * until the next hr__tenants_get or _put. */
hr__tenant *hr__tenants_find(hr__tenants *t, int uid);

/* The same, created (holding nothing) when absent; NULL: out of memory. */
hr__tenant *hr__tenants_get(hr__tenants *t, int uid);

/* Forget `uid` if it holds nothing any more. */
void hr__tenants_put(hr__tenants *t, int uid);

/* Free the table. */
void hr__tenants_free(hr__tenants *t);

/* The reserve in force: min(reserved_clients, max_clients / 2). */
int hr__tenant_reserve(const hr__config *cfg);

/* May one more connection of a uid holding `held` be counted, with
 * `clients` counted already? HR_OK, or HR_ELIMIT with the reason, naming
 * the config key, in `why`. */
int hr__tenant_admit(const hr__config *cfg, int clients, int held,
                     char *why, size_t n);

/* May `t` (NULL: a uid holding nothing) register one more footprint of
 * `ctas` CTAs in flight on `gpu` (0..HR_MAX_GPUS-1)? HR_OK, or HR_ELIMIT
 * with the reason in `why`. */
int hr__tenant_may_register(const hr__config *cfg, const hr__tenant *t,
                            int gpu, int ctas, char *why, size_t n);

/* Count a footprint of `ctas` CTAs on `gpu` in (`sign` 1) or out (-1). */
void hr__tenant_count_comm(hr__tenant *t, int gpu, int ctas, int sign);

#endif /* HR_DAEMON_TENANT_H */
