/*
 * hr_client_int.h: the client object, its leases and footprints, as the
 * library's own files see them.
 *
 * Locking, in the order they may be taken:
 *   client->mu     lists, states, ids, pending requests, topology, cache
 *   lease->mu      the full hr_budget copy of one lease
 *   client->wmu    the descriptor requests are written to
 * The hot path (hr_lease_grid and friends) takes none of them: it reads one
 * atomic word per lease.
 *
 * Connection states, changed only by the I/O thread (and hr_client_open
 * before that thread exists):
 *   DOWN     no daemon: leases are degraded, new footprints and leases are
 *            kept locally, the I/O thread retries every reconnect_ms
 *   SYNCING  a daemon accepted hello; the I/O thread re-registers every
 *            footprint and re-acquires every lease. Calls that change the
 *            lists wait for it to finish, so the lists hold still meanwhile.
 *   UP       requests go to the daemon; replies come back through the I/O
 *            thread, matched by id.
 */
#ifndef HR_CLIENT_INT_H
#define HR_CLIENT_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "headroom.h"
#include "hr_conn.h"
#include "hr_proto.h"
#include "policy.h"

enum { HR__DOWN = 0, HR__SYNCING, HR__UP };

/* What the environment said when the client was opened, for the budgets
 * computed with no daemon (hr_fallback.c). Read once so that the I/O
 * thread never calls getenv() while the application may be calling
 * setenv(). */
typedef struct hr__fallback {
  int headroom;            /* DG_MEGA_MOE_SM_HEADROOM when valid, else 0 */
  int headroom_set;        /* the variable was set (valid or not) */
  int headroom_valid;      /* ... and is a number of SMs */
  char headroom_raw[32];   /* its text, for the warning */
  int allow_full_grid;     /* HEADROOM_ALLOW_FULL_GRID=1: with
                            * DG_MEGA_MOE_SM_HEADROOM=0, the full grid */
  int nccl_min_ctas;       /* NCCL_MIN_CTAS, 0 when unset */
  int nccl_max_ctas;       /* NCCL_MAX_CTAS, 0 when unset */
} hr__fallback;

/* What this process holds on one GPU, as the fallback sizes it. */
typedef struct hr__fallback_in {
  int gpu;
  int sms;                 /* SMs of the GPU (hr__fallback_sms) */
  int granularity;         /* green-context step; 0: no partitions */
  int cluster;             /* largest cluster of its headroom and
                            * cooperative leases on the GPU, else
                            * HR_POLICY_DEFAULT_CLUSTER */
  int n_footprints;
  const hr_footprint *footprints;
} hr__fallback_in;

/* A request waiting for its reply; lives on the requester's stack. */
typedef struct hr__pending {
  int64_t id;
  int done;                /* set by the I/O thread */
  int err;                 /* HR_OK, an error reply's code, HR_ECLOSED */
  hr_reply reply;          /* owned by the requester once done */
  struct hr__pending *next;
} hr__pending;

struct hr_comm {
  hr_client *client;       /* NULL once closed (hr_orphan.c) */
  int held;                /* the caller got the handle (out != NULL) */
  int closed;              /* its client was closed; only freeing is left */
  int gpu, ctas, cga, concurrent;
  char name[HR_NAME_MAX];
  int64_t daemon_id;       /* 0: not registered on connection `gen` */
  uint64_t gen;            /* the connection daemon_id belongs to */
  struct hr_comm *prev, *next;
};

struct hr_lease {
  /* The hot path's word: grid (bits 0-15), headroom (16-27), log2 of the
   * budget's cluster size (28-29), closed (30), degraded (31), epoch
   * (32-63). Written last, with release order, after `budget` so that a
   * reader that sees a new word also sees its budget. */
  _Atomic uint64_t word;
  hr_client *client;       /* NULL once closed (hr_orphan.c) */
  int closed;              /* its client was closed; only freeing is left */
  int gpu, cluster;
  hr_mode mode;
  int64_t daemon_id;       /* 0: not held on connection `gen` */
  uint64_t gen;
  pthread_mutex_t mu;      /* guards budget */
  hr_budget budget;
  /* Under client->mu: the daemon's last budget for this lease when the
   * daemon went away; while degraded the lease keeps it where it leaves
   * more headroom than the one computed here (hr__lease_fallback_budget). */
  int have_kept;
  hr_budget kept;
  struct hr_lease *prev, *next;
};

struct hr_client {
  pthread_mutex_t mu;
  pthread_cond_t reply_cv;   /* a pending request completed */
  pthread_cond_t state_cv;   /* state or gen changed */
  pthread_cond_t change_cv;  /* some lease's word changed */
  pthread_mutex_t wmu;

  /* Set at open, then read-only. */
  char *path;
  char name[HR_NAME_MAX];
  int request_timeout_ms;
  int reconnect_ms;
  int quiet;
  hr__fallback fallback;
  int wake[2];               /* pipe: a byte in wake[1] stops the thread */
  pthread_t thread;
  int thread_started;

  /* Owned by the I/O thread (reads); written by requesters under wmu. */
  hr__conn conn;
  int wfd;                   /* under wmu: fd requests go to, -1 if none */
  uint64_t wgen;             /* under wmu: connection wfd belongs to */

  /* Under mu. */
  int state;                 /* HR__DOWN, HR__SYNCING, HR__UP */
  int stopping;
  uint64_t gen;              /* bumped for every new connection */
  int64_t next_id;
  hr__pending *pending;
  int64_t down_since_ms;     /* monotonic: when the client last went
                              * without a daemon; 0 while it has one */
  int have_topology;         /* a daemon has described the node */
  hr_topology topology;      /* the last one a daemon reported */
  char daemon_name[HR_NAME_MAX];
  hr_budget gpu_budget[HR_MAX_GPUS]; /* latest budget seen per GPU ... */
  uint64_t gpu_budget_gen[HR_MAX_GPUS]; /* ... valid when == gen */
  uint32_t fb_epoch[HR_MAX_GPUS]; /* epoch of the budgets computed here */
  hr_comm *comms;
  hr_lease *leases;

  _Atomic int connected;     /* state == UP, for the lock-free query */
};

/* ---- hr_client.c ------------------------------------------------------- */

/* Send `req` on the current connection and wait for its reply. Called
 * with c->mu held and c->state == HR__UP; returns with it held. On HR_OK
 * `rep` is the reply (hr_reply_free it). HR_ECLOSED when the connection
 * went away first, HR_ETIMEDOUT, or the daemon's error code. `*gen` is the
 * connection the request went out on. */
int hr__client_call_locked(hr_client *c, hr_request *req, hr_reply *rep,
                           uint64_t *gen);

/* Wait (c->mu held) until no resync is running and the connection is not
 * the one that just failed (`failed_gen`, 0 for none). */
int hr__client_wait_settled(hr_client *c, uint64_t failed_gen);

/* Ask the daemon to drop what it holds for one of our objects (`type`
 * HR_MSG_UNREGISTER_COMM or HR_MSG_RELEASE; the object's daemon id and
 * connection generation, read afresh on each try) with c->mu held, riding
 * out a resync that re-registered it meanwhile. HR_OK when the daemon
 * holds nothing for it; else the daemon's answer. */
int hr__client_drop_remote(hr_client *c, hr_msg_type type,
                           const int64_t *daemon_id, const uint64_t *obj_gen);

/* Record a budget the daemon sent for a GPU (c->mu held) and apply it to
 * every lease on that GPU. */
void hr__client_note_budget(hr_client *c, const hr_budget *b);

/* The latest budget the daemon sent for `gpu` on this connection (c->mu
 * held); 0 if none. */
int hr__client_known_budget(hr_client *c, int gpu, hr_budget *out);

/* SMs of `gpu`: the daemon's last topology, else CUDA, else 132. */
int hr__client_sms(hr_client *c, int gpu);

/* Check gpu against 0..HR_MAX_GPUS-1 and the topology when known. */
int hr__client_check_gpu(hr_client *c, int gpu);

/* Write a line of its own (a cleanup request) with the next id; c->mu
 * must not be held. Replies to it are ignored. */
void hr__client_send_async(hr_client *c, hr_request *req);

/* ---- hr_io.c ----------------------------------------------------------- */

void *hr__io_main(void *arg);

/* Handle one decoded message from the daemon with the I/O thread's own
 * dispatch (c->mu not held; the caller frees what is left in `rep`).
 * Returns 1 when it was the shutdown event. For the client fuzz target
 * (tests/fuzz), which has messages but no socket. */
int hr__io_handle(hr_client *c, hr_reply *rep);

/* Connect, hello, subscribe and resync. Called by hr_client_open before
 * the thread starts and by the thread itself; `why` says what failed. */
int hr__io_connect(hr_client *c, char *why, size_t why_len);

/* ---- hr_lease.c -------------------------------------------------------- */

/* Store a budget into a lease: full copy first, then the word. Caller
 * holds c->mu and broadcasts change_cv. */
void hr__lease_set_budget(hr_lease *l, const hr_budget *b);

/* Give a lease the daemon has just granted (c->mu held) the GPU's newest
 * noted budget, or the budget in the grant's `reply` when none is noted:
 * a newer push may have overtaken the reply, and the reply to an agnostic
 * or partition lease is never noted as the GPU's. */
void hr__lease_take_granted(hr_lease *l, const hr_budget *reply);

/* Fill the degraded budget of a lease (c->mu held): hr__fallback_budget
 * from this process's footprints and leases on the lease's GPU (the lease
 * itself counted, linked or not), or the daemon's last budget for it
 * where that leaves more headroom. */
int hr__lease_fallback_budget(hr_lease *l, hr_budget *out);

/* Give every lease on `gpu` that no daemon holds its degraded budget
 * again (c->mu held): after a footprint or lease came or went while
 * degraded, and when the daemon goes away. `gpu` -1: every GPU. The
 * GPU's fallback epoch goes up when a budget changed; change_cv is
 * broadcast. */
void hr__client_refresh_fallback(hr_client *c, int gpu);

/* ---- hr_env.c ---------------------------------------------------------- */

/* Read the environment once. Warns (unless quiet) about a bad value. */
void hr__fallback_read(hr__fallback *f, int quiet);

/* setenv the variables a lease stands for (see hr_lease_export_env). */
int hr__budget_export_env(const hr_budget *b);

/* Parse a whole decimal int in [min, max]; HR_EINVAL otherwise. */
int hr__parse_int(const char *s, int min, int max, int *out);

/* ---- hr_fallback.c ----------------------------------------------------- */

/* The budget of a lease in `mode` while no daemon answers: the daemon's
 * policy (policy/policy.h) on the default policy, for what this process
 * holds on the GPU (`in`), with the NCCL caps always decided (maxCTAs
 * from the policy, or NCCL_MAX_CTAS when smaller; minCTAs at most that;
 * cgaClusterSize 1; NVLS off). DG_MEGA_MOE_SM_HEADROOM can only raise the
 * headroom; headroom 0 (the full grid) only with HEADROOM_ALLOW_FULL_GRID=1
 * and DG_MEGA_MOE_SM_HEADROOM=0 both set. epoch 0, degraded 1.
 * HR_EUNSUPPORTED for a partition lease where no split fits (the budget
 * then keeps the headroom-mode numbers, as hr__policy_for_mode does);
 * HR_EINVAL for a NULL argument. */
int hr__fallback_budget(const hr__fallback *f, const hr__fallback_in *in,
                        hr_mode mode, hr_budget *out);

/* SMs of CUDA device `gpu` when the driver says, else
 * HR_POLICY_DEFAULT_SMS; and its green-context step, else
 * HR__DEFAULT_PARTITION_GRANULARITY. */
int hr__fallback_sms(int gpu);
int hr__fallback_granularity(int gpu);

/* 1 when the environment forces the full grid: HEADROOM_ALLOW_FULL_GRID=1
 * and DG_MEGA_MOE_SM_HEADROOM=0. */
int hr__fallback_full_grid(const hr__fallback *f);

/* The one-per-process notice that no daemon answered, with the budget
 * computed for `b`'s GPU. */
void hr__fallback_notice(const hr__fallback *f, const char *path,
                         const char *why, const hr_budget *b);

/* The partition fields of `b` (granularity, comm SMs, NCCL cap) for a GPU
 * of `sms` SMs split in steps of `granularity`: a comm partition of `need`
 * SMs (at least 1) rounded up to the step, at most `ceiling` rounded down
 * to it, and an NCCL cap of the largest power of two p with p *
 * `collectives` <= its SMs (1 at the least), no more than `nccl_max_ctas`
 * (0: no limit).
 * All three 0 when no such partition exists. The daemon's rule, applied
 * to degraded budgets whose DG_MEGA_MOE_SM_HEADROOM asks for more. */
void hr__partition_fields(hr_budget *b, int sms, int granularity, int need,
                          int collectives, int ceiling, int nccl_max_ctas);

/* ---- hr_orphan.c ------------------------------------------------------- */

/* hr_client_close's part for the handles: every lease and every footprint
 * the caller holds is marked closed (its hot-path word too, so readers
 * get HR_ECLOSED) and kept, reachable, in a list of the process until its
 * owner frees it; footprints registered with out == NULL are freed. The
 * client's lists are empty afterwards. c->mu need not be held: the I/O
 * thread has stopped. */
void hr__orphan_adopt(hr_client *c);

/* Take a closed lease or footprint out of that list (1), or say it is not
 * closed (0, and nothing changes). */
int hr__orphan_take_lease(hr_lease *l);
int hr__orphan_take_comm(hr_comm *m);

/* Mark a lease closed in its word (hr_lease.c). */
void hr__lease_close_word(hr_lease *l);

/* ---- hr_text.c --------------------------------------------------------- */

/* 1 when `s` is well-formed UTF-8 (what the wire accepts), else 0. */
int hr__text_valid(const char *s);

/* Copy `src` into `dst` (size bytes, '\0' included): cut at a character
 * boundary, with '?' for every byte that is not part of a character. */
void hr__text_copy(char *dst, size_t size, const char *src);

/* The same for names, which the daemon refuses with a control character
 * in them (hr_proto_name_control): valid, and a copy with '?' for each. */
int hr__name_valid(const char *s);
void hr__name_copy(char *dst, size_t size, const char *src);

/* ---- hr_cuda.c --------------------------------------------------------- */

/* SMs of CUDA device `gpu` through the driver (dlopen'ed), or HR_ENOGPU. */
int hr__cuda_sms(int gpu);

/* The SM step of a green-context split of CUDA device `gpu` that keeps
 * co-scheduling: max(smCoscheduledAlignment, minSmPartitionSize). HR_ENOGPU
 * without the device; HR_EUNSUPPORTED when the driver (or a build without
 * cuda.h) cannot say. */
int hr__cuda_sm_alignment(int gpu);

/* The driver's entry point `name` (base name, no _v2) as of CUDA `version`
 * (1000 * major + 10 * minor), legacy default stream. HR_ENOGPU without a
 * driver or device; HR_EUNSUPPORTED when the driver is older or lacks it. */
int hr__cuda_proc(const char *name, int version, void **fn);

/* cuGetErrorName's text for a CUresult; else "CUresult N" written in buf. */
const char *hr__cuda_error_name(int result, char *buf, size_t size);

/* For tests: open `path` instead of libcuda.so.1. HR_EINVAL once the
 * driver has been looked for. */
int hr__cuda_use_library(const char *path);

/* The granularity of degraded partition budgets when no driver says. */
#define HR__DEFAULT_PARTITION_GRANULARITY 8

#endif /* HR_CLIENT_INT_H */
