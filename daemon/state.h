/*
 * state.h: what headroomd knows about each GPU, and every change to it.
 *
 * No sockets and no clock here: a change comes in as a client id and a
 * decoded request, and goes out as the GPUs whose budget changed (a bit
 * mask), so the daemon can push events, and the unit tests can drive every
 * transition directly.
 *
 * After any change to a GPU's inputs the budget is recomputed with the
 * policy (policy.h); when its numbers differ, the GPU's epoch goes up by
 * one. The input cluster is the largest among the GPU's leases (agnostic
 * and partition ones aside), 2 when it has none (the mega kernel's usual
 * pairs). The partition fields count as numbers of the budget: a change
 * of them alone bumps the epoch too, since partition leases act on them.
 *
 * Ids (clients, footprints, leases, incidents) start at 1 and are never
 * reused for the life of the daemon; incident ids also stay above those of
 * incidents restored from the state file.
 */
#ifndef HR_DAEMON_STATE_H
#define HR_DAEMON_STATE_H

#include <stdint.h>

#include "calibration.h"
#include "hr_proto.h"
#include "policy.h"

/* Incidents kept per GPU: this many of each kind, so reports of one kind
 * never push out those of another. When a kind is full, the one that
 * goes is the oldest of the uid holding the most of that kind (the
 * reporter's own on a tie): a uid flooding reports evicts its own, and
 * can push out another uid's only while that uid holds as many. */
#define HR__INCIDENTS_PER_KIND 16
#define HR__INCIDENTS_KEPT (HR__INCIDENTS_PER_KIND * HR_INCIDENT_COUNT)
/* uids whose latest raise of a GPU is remembered for the rate limit. */
#define HR__RAISE_UIDS 16
#define HR__DEFAULT_CLUSTER 2        /* input cluster of a GPU with no lease */

/* Bit g set: GPU g's budget changed (HR_MAX_GPUS is 64). */
typedef uint64_t hr__gpu_mask;

typedef struct hr__comm_rec {
  int64_t id, client;
  char name[HR_NAME_MAX];
  int ctas, cga, concurrent;
} hr__comm_rec;

typedef struct hr__lease_rec {
  int64_t id, client;
  int cluster;
  hr_mode mode;
} hr__lease_rec;

/* What raised a GPU's headroom since the operator last cleared it. */
typedef struct hr__raise_rec {
  int raises;                       /* barrier timeouts that raised it */
  int64_t last_ms;                  /* Unix ms of the latest; 0: none */
  int last_uid;                     /* its reporter; -1: unknown */
  int64_t last_incident;            /* its incident; 0: none */
} hr__raise_rec;

/* A uid's latest raise of one GPU (the rate limit; not saved). */
typedef struct hr__raise_by {
  int uid;
  int64_t ms;
} hr__raise_by;

/* What a barrier timeout did to the GPU's headroom. */
typedef enum hr__raise_outcome {
  HR__RAISE_NONE = 0,               /* not a timeout, or incident_raise off */
  HR__RAISE_DONE,                   /* raised (or at the ceiling already) */
  HR__RAISE_LIMITED                 /* this uid raised it too recently */
} hr__raise_outcome;

typedef struct hr__gpu {
  hr_gpu_info info;
  /* Footprints, in registration order; `fps` mirrors them index by index
   * in the form the policy takes. */
  hr__comm_rec *comms;
  hr_footprint *fps;
  int n_comms, cap_comms;
  hr__lease_rec *leases;
  int n_leases, cap_leases;
  hr_status_incident incidents[HR__INCIDENTS_KEPT]; /* oldest first */
  int incident_uid[HR__INCIDENTS_KEPT]; /* their reporters; -1: unknown */
  int n_incidents;
  int raised;                       /* headroom added by incidents */
  hr__raise_rec raise;
  hr__raise_by raise_by[HR__RAISE_UIDS];
  int n_raise_by;
  int granularity;                  /* SMs per green-context step; 0: none */
  uint32_t epoch;
  hr_budget budget;                 /* in force; mode is HR_MODE_HEADROOM */
  hr_budget_source source;          /* what decided budget.headroom */
} hr__gpu;

typedef struct hr__state {
  hr_policy policy;
  int n_gpus;
  hr__gpu *gpus;
  int64_t next_client, next_comm, next_lease, next_incident;
  /* The node's calibration, NULL when none is in force; it applies to the
   * GPUs it covers (hr__calibration_covers), theory to the others. */
  hr__calibration *calib;
  /* A uid's barrier timeouts raise one GPU at most once in this many ms
   * (incident_raise_interval); 0: no limit. */
  int64_t raise_interval_ms;
  /* The uid of a connected client, -1 when unknown: a raise leaves out
   * every footprint of the reporter's uid, whichever connection holds it.
   * NULL: only the reporting client's own (the unit tests' default). */
  int (*uid_of)(const void *ctx, int64_t client);
  const void *uid_ctx;
  /* Set when something the state file keeps (raised, epoch, incidents)
   * changed; the owner saves and clears it. */
  int dirty;
} hr__state;

/* Start with the topology's GPUs, no clients, epoch 1, budgets computed.
 * `granularity[g]` is GPU g's green-context step (topology.h); NULL: no
 * GPU can be partitioned. */
int hr__state_init(hr__state *s, const hr_topology *topo,
                   const int *granularity, const hr_policy *policy);
void hr__state_free(hr__state *s);

/* A fresh client id. */
int64_t hr__state_client_id(hr__state *s);

/* The GPU, NULL when out of the topology. */
const hr__gpu *hr__state_gpu(const hr__state *s, int gpu);

/* The budget a lease in `mode` gets on `gpu` now (hr__policy_lease_budget):
 * HR_MODE_HEADROOM for the GPU's own. HR_ENOTFOUND, HR_EINVAL (mode). */
int hr__state_budget(const hr__state *s, int gpu, hr_mode mode,
                     hr_budget *out);

/* Register a footprint. HR_ENOTFOUND (gpu), HR_ENOMEM. */
int hr__state_comm_add(hr__state *s, int64_t client,
                       const hr_req_register_comm *req, int64_t *id,
                       hr__gpu_mask *changed);

/* Remove one of `client`'s own footprints; HR_ENOTFOUND otherwise. */
int hr__state_comm_remove(hr__state *s, int64_t client, int64_t comm,
                          hr__gpu_mask *changed);

/* Take a lease; `out` is the budget after it, in the lease's mode.
 * HR_ENOTFOUND (gpu), HR_EINVAL (cluster), HR_EUNSUPPORTED (a mode that
 * does not exist, or a partition lease on a GPU whose budget has no
 * partition: nothing is taken, and `out` holds that budget, for the
 * caller to say why). */
int hr__state_lease_add(hr__state *s, int64_t client, const hr_req_lease *req,
                        int64_t *id, hr_budget *out, hr__gpu_mask *changed);

/* Release one of `client`'s own leases; HR_ENOTFOUND otherwise. */
int hr__state_lease_remove(hr__state *s, int64_t client, int64_t lease,
                           hr__gpu_mask *changed);

/* Record an incident from `client` (of `uid`) at `time_ms` (Unix ms). A
 * lease it names must be the client's own, on that GPU. A barrier
 * timeout raises the GPU's headroom one cluster above what the policy
 * and the footprints of the GPU's other tenants explain (hr__policy_raise
 * without the footprints of the reporter's uid, see uid_of), unless the
 * same uid raised this GPU less than raise_interval_ms ago; a launch
 * failure is only recorded.
 * `out` is the budget after, in the mode of the lease named, else
 * headroom; `outcome` (may be NULL) says what the raise did.
 * HR_ENOTFOUND (gpu, or a lease not on it), HR_EPERM (another client's
 * lease): nothing is recorded then. */
int hr__state_report(hr__state *s, int64_t client, int uid,
                     const hr_req_report *req, int64_t time_ms,
                     int64_t *incident, hr_budget *out,
                     hr__gpu_mask *changed, hr__raise_outcome *outcome);

/* GPU `gpu`'s learned raise now. HR_ENOTFOUND. */
int hr__state_raise_info(const hr__state *s, int gpu, hr_raise *out);

/* Forget what incidents taught GPU `gpu` (-1: every GPU): raised 0, the
 * raise record and the rate limit cleared, budgets recomputed. The
 * incidents themselves stay listed. Returns how many GPUs had a raise to
 * clear, HR_ENOTFOUND. */
int hr__state_raises_clear(hr__state *s, int gpu, hr__gpu_mask *changed);

/* Replace the policy (validated by the caller) and recompute every GPU. */
void hr__state_set_policy(hr__state *s, const hr_policy *policy,
                          hr__gpu_mask *changed);

/* Put calibration `c` in force (a copy is kept), or none when NULL, and
 * recompute every GPU. Returns how many GPUs it covers, HR_ENOMEM. */
int hr__state_set_calibration(hr__state *s, const hr__calibration *c,
                              hr__gpu_mask *changed);

/* Drop every footprint and lease of `client` (its connection closed). */
void hr__state_drop_client(hr__state *s, int64_t client,
                           hr__gpu_mask *changed);

/* Clients holding a footprint or a lease on `gpu`. */
int hr__state_clients_on(const hr__state *s, int gpu);

/* Comm CTAs in flight on `gpu`: hr__policy_comm_ctas of its footprints.
 * 0 for a GPU out of the topology. */
int hr__state_comm_ctas(const hr__state *s, int gpu);

/* The leases on `gpu` by mode, into counts[0..HR_MODE_COUNT). */
void hr__state_lease_counts(const hr__state *s, int gpu, int *counts);

/* Restore learned state read from the state file: `raised`, the epoch to
 * continue from, and incidents (oldest first, with their reporters' uids
 * in `uids`, NULL: unknown; kept by the same rule as new ones).
 * Recomputes without bumping the epoch. HR_ENOTFOUND (gpu), HR_EINVAL (a
 * negative raised, epoch 0). */
int hr__state_restore(hr__state *s, int gpu, int raised, uint32_t epoch,
                      const hr_status_incident *incidents, const int *uids,
                      int n);

/* Restore the raise record of `gpu`. HR_ENOTFOUND, HR_EINVAL. */
int hr__state_restore_raise(hr__state *s, int gpu, const hr__raise_rec *r);

#endif /* HR_DAEMON_STATE_H */
