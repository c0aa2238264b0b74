/*
 * trials_report.c: a series of trials over both ranks, in numbers
 * (trials.h).
 */
#include "trials.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Nearest rank; -1 when there is no value. */
double tr_percentile(const double *v, int n, double p)
{
  double *c, out;
  int k;

  if(n <= 0)
    return -1;
  c = malloc(sizeof(double) * (size_t)n);
  if(!c)
    return -1;
  memcpy(c, v, sizeof(double) * (size_t)n);
  qsort(c, (size_t)n, sizeof(double), cmp_double);
  k = (int)(p / 100.0 * n + 0.999999) - 1;
  if(k < 0)
    k = 0;
  if(k >= n)
    k = n - 1;
  out = c[k];
  free(c);
  return out;
}

/* The fields of a tr_outcome sent between the ranks, in the order they
 * travel, each with the type it is read back as: one list, so that pack
 * and unpack cannot disagree. */
#define OUTCOME_FIELDS(X)                                                   \
  X(rc, int) X(wrong, int) X(grid, int) X(mega_ms, double)                  \
  X(coll_ms, double) X(sync_ms, double) X(barrier, int) X(arrived, int)     \
  X(expected, int) X(trapped, int) X(after_rc, int) X(after_wrong, int)

#define OUTCOME_COUNT(name, type) +1
_Static_assert(0 OUTCOME_FIELDS(OUTCOME_COUNT) == TR_OUTCOME_FIELDS,
               "TR_OUTCOME_FIELDS is the length of OUTCOME_FIELDS");
#undef OUTCOME_COUNT

static void pack(const tr_outcome *o, double *v)
{
  int i = 0;
#define OUTCOME_PACK(name, type) v[i++] = o->name;
  OUTCOME_FIELDS(OUTCOME_PACK)
#undef OUTCOME_PACK
}

static void unpack(const double *v, tr_outcome *o)
{
  int i = 0;
#define OUTCOME_UNPACK(name, type) o->name = (type)v[i++];
  OUTCOME_FIELDS(OUTCOME_UNPACK)
#undef OUTCOME_UNPACK
}

void tr_gather_outcomes(tr_rank *r, const char *tag, const tr_outcome *mine,
                        int n, tr_outcome *both)
{
  const int f = TR_OUTCOME_FIELDS;
  double *v = calloc((size_t)n * f + 1, sizeof(double));
  double *all = calloc((size_t)n * f * 2 + 1, sizeof(double));
  int i;

  if(!v || !all) {
    tr_log(r, "FAIL: out of memory");
    _exit(1);
  }
  for(i = 0; i < n; i++)
    pack(&mine[i], v + (size_t)i * f);
  tr_gather(r, tag, v, n * f, all);
  for(i = 0; i < 2 * n; i++)
    unpack(all + (size_t)i * f, &both[i]);
  free(v);
  free(all);
}

/* The non-negative values of one group of outcomes (-1: not measured). */
typedef struct sel {
  double *v;
  int n;
} sel;

static void sel_add(sel *s, double v)
{
  if(v >= 0)
    s->v[s->n++] = v;
}

void tr_summarize(const tr_outcome *both, int n, uint64_t seed, tr_summary *s)
{
  sel mega = { 0 }, coll = { 0 }, by_t[TR_NTOKENS], om[TR_NORDERS],
      oc[TR_NORDERS];
  tr_trial t;
  int i, k, j;

  memset(s, 0, sizeof(*s));
  s->trials = n;
  s->grid_min = 1 << 30;
  memset(by_t, 0, sizeof(by_t));
  memset(om, 0, sizeof(om));
  memset(oc, 0, sizeof(oc));
  mega.v = malloc(sizeof(double) * 2 * (size_t)n + 1);
  coll.v = malloc(sizeof(double) * 2 * (size_t)n + 1);
  for(k = 0; k < TR_NTOKENS; k++)
    by_t[k].v = malloc(sizeof(double) * 2 * (size_t)n + 1);
  for(k = 0; k < TR_NORDERS; k++) {
    om[k].v = malloc(sizeof(double) * 2 * (size_t)n + 1);
    oc[k].v = malloc(sizeof(double) * 2 * (size_t)n + 1);
  }
  for(i = 0; i < n; i++) {
    tr_plan_trial(&t, seed, i);
    s->order_n[t.order]++;
    for(j = 0; j < 2; j++) {
      const tr_outcome *o = &both[(size_t)j * n + i];
      s->launches++;
      s->timeouts += o->rc == HR_EBARRIER_TIMEOUT;
      s->errors += o->rc != HR_OK && o->rc != HR_EBARRIER_TIMEOUT;
      s->wrong += o->wrong;
      s->order_timeouts[t.order] += o->rc == HR_EBARRIER_TIMEOUT;
      s->order_wrong[t.order] += o->wrong;
      if(o->grid < s->grid_min)
        s->grid_min = o->grid;
      if(o->grid > s->grid_max)
        s->grid_max = o->grid;
      if(o->rc == HR_OK) {
        sel_add(&mega, o->mega_ms);
        sel_add(&by_t[t.tokens_i], o->mega_ms);
        sel_add(&om[t.order], o->mega_ms);
      }
      sel_add(&coll, o->coll_ms);
      sel_add(&oc[t.order], o->coll_ms);
    }
  }
  s->mega_p50 = tr_percentile(mega.v, mega.n, 50);
  s->mega_p99 = tr_percentile(mega.v, mega.n, 99);
  s->coll_p50 = tr_percentile(coll.v, coll.n, 50);
  s->coll_p99 = tr_percentile(coll.v, coll.n, 99);
  for(k = 0; k < TR_NTOKENS; k++) {
    s->mega_p50_t[k] = tr_percentile(by_t[k].v, by_t[k].n, 50);
    s->mega_p99_t[k] = tr_percentile(by_t[k].v, by_t[k].n, 99);
    free(by_t[k].v);
  }
  for(k = 0; k < TR_NORDERS; k++) {
    s->order_mega_p50[k] = tr_percentile(om[k].v, om[k].n, 50);
    s->order_coll_p50[k] = tr_percentile(oc[k].v, oc[k].n, 50);
    s->order_coll_p99[k] = tr_percentile(oc[k].v, oc[k].n, 99);
    free(om[k].v);
    free(oc[k].v);
  }
  if(s->grid_min > s->grid_max)
    s->grid_min = 0;
  free(mega.v);
  free(coll.v);
  s->valid = 1;
}

const char *tr_ms(char *buf, size_t n, double v)
{
  if(v < 0)
    snprintf(buf, n, "-");
  else
    snprintf(buf, n, "%.3f", v);
  return buf;
}

const char *tr_verdict(const tr_rank *r, int passed)
{
  return r->o.no_gpu ? "DRY-RUN" : passed ? "PASS" : "FAIL";
}

void tr_print_summary(const tr_rank *r, const char *mode, const tr_summary *s,
                      const tr_summary *ref)
{
  char a[16], b[16], c[16], d[16], e[16], f[16], g[16], h[16];
  int k;

  if(r->rank != 0 || !s->valid)
    return;
  tr_say(r, "%s mode, by launch order (both ranks; times in ms; "
         "collectives: first enqueued to last done):", mode);
  tr_say(r, "  %-13s %6s %8s %6s %9s %9s %9s", "order", "trials", "timeouts",
         "wrong", "mega p50", "coll p50", "coll p99");
  for(k = 0; k < TR_NORDERS; k++)
    tr_say(r, "  %-13s %6d %8d %6d %9s %9s %9s", tr_order_name((tr_order)k),
           s->order_n[k], s->order_timeouts[k], s->order_wrong[k],
           tr_ms(a, sizeof(a), s->order_mega_p50[k]),
           tr_ms(b, sizeof(b), s->order_coll_p50[k]),
           tr_ms(c, sizeof(c), s->order_coll_p99[k]));
  tr_say(r, "%s mode, mega kernel by token count (ms)%s:", mode,
         ref && ref->valid ? ", headroom mode beside it" : "");
  for(k = 0; k < TR_NTOKENS; k++) {
    if(ref && ref->valid)
      tr_say(r, "  T=%-5d p50 %9s p99 %9s   (headroom mode: p50 %s p99 %s)",
             tr_tokens[k], tr_ms(a, sizeof(a), s->mega_p50_t[k]),
             tr_ms(b, sizeof(b), s->mega_p99_t[k]),
             tr_ms(c, sizeof(c), ref->mega_p50_t[k]),
             tr_ms(d, sizeof(d), ref->mega_p99_t[k]));
    else
      tr_say(r, "  T=%-5d p50 %9s p99 %9s", tr_tokens[k],
             tr_ms(a, sizeof(a), s->mega_p50_t[k]),
             tr_ms(b, sizeof(b), s->mega_p99_t[k]));
  }
  if(ref && ref->valid)
    tr_say(r, "%s vs headroom mode (all trials, ms): mega p50 %s / %s, "
           "p99 %s / %s; collectives p50 %s / %s, p99 %s / %s", mode,
           tr_ms(a, sizeof(a), s->mega_p50), tr_ms(b, sizeof(b), ref->mega_p50),
           tr_ms(c, sizeof(c), s->mega_p99), tr_ms(d, sizeof(d), ref->mega_p99),
           tr_ms(e, sizeof(e), s->coll_p50), tr_ms(f, sizeof(f), ref->coll_p50),
           tr_ms(g, sizeof(g), s->coll_p99), tr_ms(h, sizeof(h), ref->coll_p99));
}
