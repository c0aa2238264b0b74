/*
 * moe_ep.h: the expert-parallel forward's host logic that needs no GPU
 * (moe_ep_plan.c, plain C11): the argument checks, where everything lives
 * in a rank's two allocations, and the bootstrap's exchange of what peers
 * need to map a rank's block. Internal: prefix hr__. The unit tests
 * (tests/unit/test_moe_ep_plan.c) run all of it on any machine.
 */
#ifndef HR_MOE_EP_H
#define HR_MOE_EP_H

#include <stddef.h>
#include <stdint.h>

#include "headroom_moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One 128-byte line per flag word, so a peer's release into one word does
 * not bounce the line another is polled on. */
#define HR__MOE_EP_LINE_WORDS 16

/* The head of a rank's peer-visible block: words written by peers (and by
 * the rank itself, as its own peer), polled by the rank. All start at 0
 * and are never reset: every word carries the launch epoch in its high
 * 32 bits, and epochs start at 1 and only grow, so a word of an earlier
 * launch never reads as this one's. */
typedef struct hr__moe_ep_flags {
  /* [src]: (epoch << 32) | rows source src sent here this epoch */
  unsigned long long disp[HR_MOE_EP_MAX_RANKS][HR__MOE_EP_LINE_WORDS];
  /* [dst]: epoch << 32 once rank dst has sent back every result row */
  unsigned long long ret[HR_MOE_EP_MAX_RANKS][HR__MOE_EP_LINE_WORDS];
  /* [rank]: that rank's own failure of an epoch (hr__moe_ep_fail_word) */
  unsigned long long fail[HR_MOE_EP_MAX_RANKS][HR__MOE_EP_LINE_WORDS];
} hr__moe_ep_flags;

/* A fail word: epoch, the rank's code (HR__MOE_FAIL_TIMEOUT, _ABORT,
 * _STALE of moe_kernel.h), where (HR_MOE_EP_WAIT_*) and which rank it
 * waited for (0xff: none). */
#define HR__MOE_EP_FAIL_WORD(epoch, code, wait, waited_for)                  \
  (((unsigned long long)(epoch) << 32) | ((unsigned long long)((code) & 0xff) << 24) | \
   ((unsigned long long)((wait) & 0xff) << 16) | ((unsigned long long)((waited_for) & 0xff) << 8))
#define HR__MOE_EP_FAIL_EPOCH(w) ((uint32_t)((w) >> 32))
#define HR__MOE_EP_FAIL_CODE(w) ((int)(((w) >> 24) & 0xff))
#define HR__MOE_EP_FAIL_WAIT(w) ((int)(((w) >> 16) & 0xff))
#define HR__MOE_EP_FAIL_WAITED(w) ((int)(((w) >> 8) & 0xff) == 0xff ? -1 : (int)(((w) >> 8) & 0xff))

/* Where everything lives, in bytes from the start of each allocation.
 * rows = nranks * max_tokens received rows at most (region src holds
 * source src's, max_tokens of them); pairs = rows * topk. */
typedef struct hr__moe_ep_layout {
  int nranks, local_experts;
  int backward;         /* 1: room for hr_moe_ep_backward too */
  int64_t cap;          /* rows per source region: max_tokens */
  int64_t rows, pairs;
  /* the peer-visible block; the backward's recv_w, recv_dy and ret_dw
   * are 0 (and take nothing) without the backward */
  uint64_t flags, recv_ids, recv_tok, recv_x, ret, recv_w, recv_dy, ret_dw, peer_bytes;
  /* the local workspace; reset_bytes from its start are what a failed
   * launch leaves dirty (the grid barrier's words, the agnostic form's
   * schedule and counters). The backward's
   * sorted_pair, dh and dwp are 0 without it (its w a and dx rows use
   * the forward's h and ypair) */
  uint64_t sync, agn, g1_done, g2_done, sorted_tok, pos_of, src_pos, h, ypair;
  uint64_t sorted_pair, dh, dwp;
  uint64_t local_bytes, reset_bytes;
  int64_t tiles;        /* entries of g1_done and g2_done */
} hr__moe_ep_layout;

/* The shape rules of hr_moe_create, and EP's: 1 <= nranks <=
 * HR_MOE_EP_MAX_RANKS, E % nranks == 0, nranks * max_tokens * topk <=
 * 2^30. 1 when valid. */
int hr__moe_ep_shape_ok(const hr_moe_shape *s, int nranks);

/* hr_moe_ep_create's argument checks (before anything is touched):
 * HR_OK or HR_EINVAL. */
int hr__moe_ep_args_check(const hr_moe_shape *s, int rank, int nranks,
                          const hr_moe_ep_bootstrap *boot);

/* The layout for a shape hr__moe_ep_shape_ok accepts, with room for the
 * backward when `backward`: HR_OK, HR_EINVAL. */
int hr__moe_ep_layout_of(const hr_moe_shape *s, int nranks, int backward, hr__moe_ep_layout *l);

/* ---- the bootstrap's exchange ------------------------------------------ */

#define HR__MOE_EP_REC_MAGIC 0x50455248u  /* "HREP" */
#define HR__MOE_EP_REC_VERSION 1u

/* What each rank sends in the first allgather. `status` is the rank's
 * own result so far (HR_OK, or why it has no block): a rank that failed
 * to allocate still takes part, so that every rank returns its code. */
typedef struct hr__moe_ep_rec {
  uint32_t magic, version;
  int32_t status;
  int32_t rank, nranks;
  int32_t experts, hidden, inter, topk, max_tokens;
  int32_t device;
  int32_t has_ipc;               /* ipc holds a handle */
  int64_t pid;
  char host[64];                 /* gethostname: a pid names a process on one host */
  uint64_t peer_bytes;
  uint64_t ptr;                  /* the block's device address in its process */
  unsigned char ipc[64];         /* cudaIpcMemHandle_t */
} hr__moe_ep_rec;

/* How this rank reaches rank i's block. */
enum {
  HR__MOE_EP_PEER_SELF = 0,      /* its own block */
  HR__MOE_EP_PEER_POINTER = 1,   /* the pointer: the same process */
  HR__MOE_EP_PEER_IPC = 2        /* cudaIpcOpenMemHandle: another process */
};

/* This rank's record: the shape, its place, the process and host, and
 * its block (ptr, ipc: may be 0 / NULL where status says it has none). */
void hr__moe_ep_rec_fill(hr__moe_ep_rec *r, const hr_moe_shape *s, int rank, int nranks,
                         int device, int status, uint64_t peer_bytes, uint64_t ptr,
                         const void *ipc, size_t ipc_bytes);

/* Check the gathered records (recs[i] from rank i) from rank `rank`'s
 * side and say how it reaches each (kinds[i], HR__MOE_EP_PEER_*).
 * HR_OK; the first failed rank's status where one failed (the lowest
 * rank's: the same on every rank); HR_EINVAL where a record is not a
 * rank's of this group (magic, version, rank, nranks, shape, block size)
 * or the exchange asked for does not fit (pointers to another process,
 * IPC within this one, or a peer in another process without a handle).
 * Every rank sees the same records, so all agree but on the exchange,
 * which is why creation has a second allgather. */
int hr__moe_ep_recs_check(const hr__moe_ep_rec *recs, int rank, int nranks, int exchange,
                          int *kinds);

/* Run the bootstrap's allgather of `bytes` from every rank into `all`
 * (nranks * bytes): its code (0 -> HR_OK, negative HR_E* passed through,
 * anything else HR_ECONNECT). */
int hr__moe_ep_allgather(const hr_moe_ep_bootstrap *b, const void *mine, void *all,
                         size_t bytes);

/* The second allgather: every rank's status after mapping its peers; the
 * first nonzero one (the lowest rank's), or the allgather's own code. */
int hr__moe_ep_agree(const hr_moe_ep_bootstrap *b, int nranks, int status);

#ifdef __cplusplus
}
#endif

#endif /* HR_MOE_EP_H */
