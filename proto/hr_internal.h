/*
 * hr_internal.h: what the files of proto/ share with each other and with
 * nobody else: the message-type table, int-indexed name tables for
 * hr__dec_enum, and the codecs of the payloads several messages carry.
 */
#ifndef HR_INTERNAL_H
#define HR_INTERNAL_H

#include "hr_json.h"
#include "hr_proto.h"

/* Limits on ids: 2^53 - 1 so that every id is exact in a double. */
#define HR__MAX_ID ((int64_t)HR_PROTO_MAX_ID)
/* Detail fields: -1 (unknown) or a non-negative int. */
#define HR__DETAIL_MIN (-1)
/* Every HR_POLICY_* bit: a policy in a reply or status has all four. */
#define HR__POLICY_ALL \
  (HR_POLICY_MIN_HEADROOM | HR_POLICY_MAX_HEADROOM | HR_POLICY_MIN_GRID | \
   HR_POLICY_INCIDENT_RAISE)
/* Protocol versions a hello may list. */
#define HR__VERSION_MAX 1000

int hr__msg_type_from_name(const char *name, hr_msg_type *out);
/* The "type" member of `root`: a string naming a message type that
 * `accept` takes (any type when NULL); else a failure, unknown_type for a
 * name that is not one, saying it is not a `what` ("request") type. */
void hr__dec_msg_type(hr__dec *d, const cJSON *root,
                      int (*accept)(hr_msg_type), const char *what,
                      hr_msg_type *type);

const char *hr__mode_name_i(int i);
const char *hr__wire_error_name_i(int i);
const char *hr__incident_kind_name_i(int i);
const char *hr__topology_source_name_i(int i);
const char *hr__budget_source_name_i(int i);
const char *hr__status_detail_name_i(int i);

/* 1 for a mega kernel cluster size the protocol accepts: 1, 2, 4 or 8. */
int hr__cluster_valid(int cluster);

/* Payloads, as member `name` of `parent` (see PROTOCOL.md for the shapes).
 * Decoders fail on a missing member only when it is required. */
void hr__budget_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_budget *b);
void hr__budget_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_budget *b);
/* The three partition fields, with the same names and limits in a budget
 * and in a GPU's metrics. Decoding, they are optional (a daemon from
 * before partition mode sends none) and 0 when absent. */
void hr__partition_encode(hr__enc *e, cJSON *o, int granularity,
                          int comm_sms, int nccl_max_ctas);
void hr__partition_decode(hr__dec *d, const cJSON *o, int *granularity,
                          int *comm_sms, int *nccl_max_ctas);

/* An object of one count per lease mode, keyed by the mode names, every
 * name written (status's lease_count, a GPU's leases in metrics).
 * Decoding, a name missing reads as 0 and one not known is ignored, so
 * either side may know modes the other does not. */
void hr__mode_counts_encode(hr__enc *e, cJSON *parent, const char *name,
                            const int *counts);
void hr__mode_counts_decode(hr__dec *d, const cJSON *parent,
                            const char *name, int *counts);

/* `fields` picks the members written (HR_POLICY_* bits); a decoder sets
 * *fields to the members it found and requires `required` of them. */
void hr__policy_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_policy *p, unsigned fields);
void hr__policy_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_policy *p, unsigned required, unsigned *fields);

/* Details are written without their -1 fields and read back with absent
 * fields as -1; a detail that is all -1 is not written at all. */
void hr__detail_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_incident_detail *dt);
void hr__detail_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_incident_detail *dt);
void hr__detail_unknown(hr_incident_detail *dt);

/* One GPU's identity: index, sms, name, as members of `obj` itself. */
void hr__gpu_info_encode(hr__enc *e, cJSON *obj, const hr_gpu_info *g);
void hr__gpu_info_decode(hr__dec *d, const cJSON *obj, hr_gpu_info *g);

void hr__topology_encode(hr__enc *e, cJSON *parent, const char *name,
                         const hr_topology *t);
void hr__topology_decode(hr__dec *d, const cJSON *parent, const char *name,
                         hr_topology *t);

/* The status reply's "status" member. The decoder allocates the arrays and
 * frees them again itself when it fails. */
void hr__status_encode(hr__enc *e, cJSON *parent, const char *name,
                       const hr_status *s);
void hr__status_decode(hr__dec *d, const cJSON *parent, const char *name,
                       hr_status *s);

/* The metrics reply's "metrics" member (hr_metrics.c). */
void hr__metrics_encode(hr__enc *e, cJSON *parent, const char *name,
                        const hr_metrics *m);
void hr__metrics_decode(hr__dec *d, const cJSON *parent, const char *name,
                        hr_metrics *m);

/* The body of a raises_get or (`cleared` 1) raises_clear reply, as
 * members of `o` itself (hr_raises.c). */
void hr__raises_encode(hr__enc *e, cJSON *o, int cleared,
                       const hr_rep_raises *r);
void hr__raises_decode(hr__dec *d, const cJSON *o, int cleared,
                       hr_rep_raises *r);

/* Replies and events (hr_reply.c, hr_fastenc.c). hr_proto_encode_reply()
 * takes the direct encoder for the types hr__reply_fast() names and the
 * cJSON tree for the others; both give the same bytes for the same struct,
 * and the tree encoder is kept whole (every type) as the reference. */
int hr__reply_fast(hr_msg_type type);
int hr__reply_encode_fast(const hr_reply *rep, hr_buf *out);
int hr__reply_encode_tree(const hr_reply *rep, hr_buf *out);

#endif /* HR_INTERNAL_H */
