/*
 * policy.h: the budget policy, a pure function, shared by headroomd and
 * libheadroom.
 *
 * State and policy in, budget out: no I/O, no clock, no globals, so the
 * table-driven tests in tests/unit/test_policy.c pin it against the
 * measurements in docs/measurements.md. The daemon calls it whenever a
 * GPU's inputs change and bumps the epoch when the answer differs;
 * libheadroom calls the same functions, on the default policy and this
 * process's own footprints and leases, for the budgets it hands out with
 * no daemon.
 * It links nothing but itself (the wire's types and ranges are headers).
 *
 * Headroom mode, for a GPU of S SMs and a mega kernel of cluster size c:
 *
 *   ceiling  = min(max_headroom, S - min_grid), rounded down to c
 *   N        = sum over footprints of ctas x concurrent    (comm CTAs)
 *   need     = c * N       an occupied SM can strand its cluster partner,
 *                          so each comm CTA costs up to c SMs
 *                          (docs/measurements.md §1)
 *   floor    = min_headroom + raised, rounded up to c
 *   headroom = min(max(need, floor), ceiling)
 *   grid     = S - headroom
 *
 * NCCL gets maxCTAs = the largest power of two p with c * p * K <= ceiling,
 * K the collectives in flight (at least 1), capped at 64: a communicator
 * created with that cap keeps the footprint inside the ceiling.
 * cgaClusterSize is 1 (docs/measurements.md §3: NCCL's default CGA size,
 * not its channel count, set the headroom needed) and NVLS stays off.
 *
 * Calibration: headroom-calibrate (docs/calibration.md) measures, on the
 * node, the smallest headroom that kept its barrier probe out of deadlock
 * against real NCCL collectives for a set of (maxCTAs, cgaClusterSize)
 * budgets. When the budget handed out above (maxCTAs = cap, cga 1) has such
 * an entry, the comm term `need` is that entry's safe headroom rounded up
 * to c, not c * N: a measurement of this node beats the worst case. Floor,
 * ceiling and min_grid apply as before. It is used only while every
 * footprint keeps inside the measured budget (ctas <= cap, cga <= 1): a
 * communicator created otherwise was never measured, so theory decides.
 *
 * Footprints are counted as registered: they describe communicators that
 * already exist, whose CTA counts can no longer change.
 *
 * The budget a lease gets depends on its mode (hr__policy_lease_budget):
 *
 *   headroom     the GPU's budget above
 *   cooperative  the same: a cooperative grid is never partly resident,
 *                but while it waits for room it blocks every later launch
 *                of its process, so it must fit beside the comm kernels
 *                too (docs/measurements.md §1)
 *   agnostic     headroom 0, grid = S: a residency-agnostic kernel has no
 *                grid barrier, so CTAs that cannot start yet only delay
 *                it, they cannot deadlock it. It keeps the NCCL fields and
 *                the epoch: its communicators' footprints count for the
 *                other leases on the GPU like any others, and their
 *                headroom holds only while those keep to the cap. Nor does
 *                its cluster size enter the GPU's input cluster.
 *   partition    the partition fields below: headroom = the comm
 *                partition, grid = S - that, NCCL's cap inside it
 *                (hr__policy_for_mode); refused where the fields are 0.
 *                Its cluster size does not enter the input cluster either:
 *                its mega kernel never shares an SM with NCCL.
 *
 * Partition mode (green contexts, docs/measurements.md §2), in every
 * budget whatever the lease mode, for a GPU whose green contexts split
 * in steps of g SMs:
 *
 *   ceiling  = min(max_headroom, S - min_grid), rounded down to g;
 *              below g no partition fits: all three fields are 0
 *   N        = sum over footprints of ctas x concurrent, with no cluster
 *              multiplier: inside a green context the mega kernel's SMs
 *              are disjoint from NCCL's, so no comm CTA can strand a
 *              cluster partner
 *   floor    = min_headroom + raised
 *   comm     = max(N, floor, 1) rounded up to g, at most the ceiling
 *   NCCL cap = the largest power of two p with p * K <= comm (at least 1:
 *              a communicator needs a CTA), at most the GPU's own cap
 *
 * g is the device's co-scheduling alignment (8 on H100/H200), or its finer
 * step (2 on H200) when the operator has clients split ignoring
 * co-scheduling (partition_ignore_coscheduling); 0 for a GPU that cannot
 * be split at all (a driver without green contexts).
 */
#ifndef HR_POLICY_H
#define HR_POLICY_H

#include "hr_proto.h"

/* One registered comm footprint, as the policy sees it. */
typedef struct hr_footprint {
  int ctas;             /* CTAs per collective */
  int cga;              /* CGA cluster size it was created with */
  int concurrent;       /* collectives in flight at once */
} hr_footprint;

/* One budget measured by headroom-calibrate. */
typedef struct hr_calib_budget {
  int max_ctas;         /* ncclConfig_t.maxCTAs; 0: NCCL's own choice */
  int cga;              /* ncclConfig_t.cgaClusterSize; 0: NCCL's own */
  int safe_headroom;    /* smallest headroom with no deadlock; -1: none
                           found up to the largest headroom tried */
  double collective_ms; /* the collectives' time under this budget */
  int trials;           /* trials per launch order and headroom */
  int orders;           /* launch orders measured */
} hr_calib_budget;

typedef struct hr_policy_input {
  int sms;              /* SMs on the GPU */
  int cluster;          /* largest cluster size among the GPU's leases */
  int raised;           /* headroom added by incidents */
  int n_footprints;
  const hr_footprint *footprints;
  int n_calib;          /* budgets calibrated for this GPU (0: none) */
  const hr_calib_budget *calib;
  int granularity;      /* SMs per green-context step; 0: no partitions */
} hr_policy_input;

/* The default policy, when no operator set one (and always without a
 * daemon), and the SMs of a GPU that nothing describes (an H100/H200 SXM). */
#define HR_POLICY_DEFAULT_MIN_HEADROOM 2
#define HR_POLICY_DEFAULT_MAX_HEADROOM 32
#define HR_POLICY_DEFAULT_MIN_GRID 64
#define HR_POLICY_DEFAULT_INCIDENT_RAISE 1
#define HR_POLICY_DEFAULT_SMS 132
/* The input cluster of a GPU with no headroom or cooperative lease. */
#define HR_POLICY_DEFAULT_CLUSTER 2

/* The smallest min_headroom a policy may have. Rounded up to the cluster
 * it is one cluster of every size, so no lease ever gets headroom 0: one
 * NCCL CTA resident beside a grid with no SM to spare deadlocks it. */
#define HR__POLICY_MIN_FLOOR 1

/* The defaults above into `policy`. */
void hr__policy_default(hr_policy *policy);

/* Check an operator's policy; on error writes why into `why` (size n). */
int hr__policy_validate(const hr_policy *policy, char *why, size_t n);

/* Check a policy against the GPUs it will run on: refused (HR_EINVAL,
 * why naming the key, its value and the limit) when some GPU of `topo`
 * would get a headroom below its floor for some cluster size a lease can
 * have (1, 2, 4, 8), i.e. when for some GPU of S SMs and cluster c
 *   round_down(min(max_headroom, S - min_grid), c) < round_up(min_headroom, c)
 * `blame` (may be NULL) gets the HR_POLICY_* bit of the key named, 0 for
 * none. Includes hr__policy_validate. */
int hr__policy_validate_for(const hr_policy *policy, const hr_topology *topo,
                            char *why, size_t n, unsigned *blame);

/* Compute the budget of one GPU. Fills every field of `out` except gpu,
 * epoch and mode, which belong to the caller. HR_EINVAL on bad input. */
int hr__policy_budget(const hr_policy *policy, const hr_policy_input *in,
                      hr_budget *out);

/* The same, and `source` (may be NULL) says whether a calibrated entry
 * decided the comm term. */
int hr__policy_budget_src(const hr_policy *policy, const hr_policy_input *in,
                          hr_budget *out, hr_budget_source *source);

/* The calibrated entry for NCCL budget (max_ctas, cga), NULL when none
 * (or when its safe headroom was not found). */
const hr_calib_budget *hr__policy_calib_find(const hr_policy_input *in,
                                             int max_ctas, int cga);

/* The budget of a lease in `mode` on a GPU whose budget (computed by
 * hr__policy_budget, for headroom-mode leases) is `gpu`: a copy with the
 * mode filled in and, for HR_MODE_AGNOSTIC, headroom 0 and grid = sms; for
 * HR_MODE_PARTITION the partition fields (hr__policy_for_mode).
 * HR_EINVAL for a mode that does not exist, HR_EUNSUPPORTED for a
 * partition lease on a GPU whose partition fields are 0 (`out` is then
 * the GPU's headroom-mode budget with the mode set). */
int hr__policy_lease_budget(const hr_budget *gpu, hr_mode mode,
                            hr_budget *out);

/* The most SMs the comm side may have on a GPU of `sms` SMs, before any
 * rounding: min(max_headroom, sms - min_grid), at least 0. */
int hr__policy_ceiling(const hr_policy *policy, int sms);

/* Comm CTAs in flight: sum of ctas x concurrent (saturating). */
int hr__policy_comm_ctas(const hr_policy_input *in);

/* The `raised` that lifts this GPU's headroom one cluster above the
 * headroom in force now (capped at the ceiling): what a reported barrier
 * timeout does. Returns in->raised unchanged when incident_raise is off. */
int hr__policy_raise(const hr_policy *policy, const hr_policy_input *in);

/* The budget a lease in `mode` gets, from its GPU's budget `b` (the one
 * computed for headroom-mode leases, which events and status carry).
 * Headroom and cooperative leases take the numbers as they are. An
 * agnostic lease runs a kernel with no grid barrier, which cannot deadlock
 * on partial residency: it gets headroom 0 and grid = sms. It keeps the
 * NCCL fields and the epoch, since the headroom of the GPU's other leases
 * holds only while every communicator keeps to that cap. A partition
 * lease gets the comm partition as its headroom (grid = sms - that),
 * NCCL's cap inside the partition, and cgaClusterSize 1: NCCL and the mega
 * kernel run in disjoint green contexts, so the partition fields, not the
 * cluster-based headroom, are what holds. Both sides apply it: the daemon
 * to the budget in a lease or report reply, the client library to every
 * budget it stores into a lease, pushed or computed.
 *
 * Returns HR_EUNSUPPORTED for a partition lease on a GPU whose budget has
 * partition_granularity 0 (the GPU cannot be split under the policy, or
 * the daemon predates partition mode); the budget then keeps the GPU's
 * headroom-mode numbers, which are safe for an ordinary launch, with the
 * mode set. HR_OK otherwise. */
int hr__policy_for_mode(hr_budget *b, hr_mode mode);

/* The partition rule, one for the daemon's policy and the client's
 * degraded budgets: a comm partition of `need` SMs (at least 1) rounded up
 * to the green-context step `g`, under `ceiling` rounded down to it, and
 * NCCL's cap inside it: the largest power of two p <= cap_limit with
 * p x `collectives` <= the partition (one NCCL CTA per SM,
 * docs/measurements.md §4), 1 at the least. All three fields 0 when not
 * even one step fits. */
void hr__policy_partition_size(hr_budget *b, int g, int need, int ceiling,
                                int collectives, int cap_limit);

#endif /* HR_POLICY_H */
