/*
 * trials_plan.c: see trials_plan.h.
 */
#include "trials_plan.h"

#include <string.h>

const int tr_tokens[TR_NTOKENS] = { 16, 128, 1024 };

static const char *const order_names[TR_NORDERS] = {
  "cross", "coll-first", "mega-first", "back-to-back", "concurrent"
};

static const char *const op_names[TR_NOPS] = {
  "all-reduce", "all-gather", "reduce-scatter"
};

const char *tr_order_name(tr_order o)
{
  return (int)o >= 0 && o < TR_NORDERS ? order_names[o] : "?";
}

const char *tr_op_name(tr_op op)
{
  return (int)op >= 0 && op < TR_NOPS ? op_names[op] : "?";
}

/* splitmix64: a trial's numbers depend on (seed, index) only, never on
 * the trials drawn before it. */
static uint64_t next(uint64_t *s)
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int below(uint64_t *s, int n)
{
  return (int)(next(s) % (uint64_t)n);
}

static tr_coll random_coll(uint64_t *s, int comm)
{
  tr_coll c;
  c.comm = comm;
  c.op = (tr_op)below(s, TR_NOPS);
  c.bytes = ((size_t)1 << 20) << below(s, 7);      /* 1 .. 64 MiB */
  return c;
}

void tr_plan_trial(tr_trial *t, uint64_t seed, int index)
{
  uint64_t s = seed ^ ((uint64_t)(index + 1) * 0xd1b54a32d192ed03ULL);
  int i;

  memset(t, 0, sizeof(*t));
  t->index = index;
  next(&s);
  t->tokens_i = below(&s, TR_NTOKENS);
  t->order = (tr_order)below(&s, TR_NORDERS);
  switch(t->order) {
  case TR_ORDER_CROSS:
  case TR_ORDER_CONCURRENT:
    t->ncoll = TR_NCOMMS;
    break;
  case TR_ORDER_COLL_FIRST:
  case TR_ORDER_MEGA_FIRST:
    t->ncoll = 1 + below(&s, TR_NCOMMS);
    break;
  case TR_ORDER_BACK_TO_BACK:
  default:
    t->ncoll = 2 + below(&s, TR_MAX_COLL - 1);
    break;
  }
  for(i = 0; i < t->ncoll; i++)
    t->coll[i] = random_coll(&s, t->order == TR_ORDER_BACK_TO_BACK ? 0 : i);
  t->mega_at[0] = below(&s, t->ncoll + 1);
  t->mega_at[1] = below(&s, t->ncoll + 1);
  /* Long enough, at the top, for a collective to be resident and waiting
   * for its peer before the next launch. */
  t->gap_us = t->order == TR_ORDER_COLL_FIRST || t->order == TR_ORDER_MEGA_FIRST
                  ? below(&s, 2001) : below(&s, 1001);
}

void tr_plan_repro(tr_trial *t, int index)
{
  int i;

  memset(t, 0, sizeof(*t));
  t->index = index;
  t->tokens_i = TR_NTOKENS - 1;
  t->order = TR_ORDER_CROSS;
  t->ncoll = TR_NCOMMS;
  for(i = 0; i < TR_NCOMMS; i++) {
    t->coll[i].comm = i;
    t->coll[i].op = TR_ALL_REDUCE;
    t->coll[i].bytes = TR_MAX_BYTES;
  }
}

typedef struct script {
  tr_step *steps;
  int n, cap, over;
} script;

static void add(script *sc, tr_step_kind kind, int arg)
{
  if(kind == TR_STEP_PAUSE && arg <= 0)
    return;
  if(sc->n >= sc->cap) {
    sc->over = 1;
    return;
  }
  sc->steps[sc->n].kind = kind;
  sc->steps[sc->n].arg = arg;
  sc->n++;
}

int tr_plan_script(const tr_trial *t, int rank, tr_step *steps, int cap)
{
  script sc = { steps, 0, cap, 0 };
  int i;

  if(!t || !steps || rank < 0 || rank > 1 || t->ncoll < 1 ||
     t->ncoll > TR_MAX_COLL)
    return -1;
  switch(t->order) {
  case TR_ORDER_CROSS:
    if(rank == 1) {
      add(&sc, TR_STEP_COLL, 0);
      add(&sc, TR_STEP_PAUSE, 1000);     /* comm 0 resident, waiting */
      add(&sc, TR_STEP_MEGA, 0);
      for(i = 1; i < t->ncoll; i++)
        add(&sc, TR_STEP_COLL, i);
    } else {
      for(i = 1; i < t->ncoll; i++)
        add(&sc, TR_STEP_COLL, i);
      add(&sc, TR_STEP_PAUSE, 2000);
      add(&sc, TR_STEP_MEGA, 0);
      add(&sc, TR_STEP_COLL, 0);
    }
    break;
  case TR_ORDER_COLL_FIRST:
    for(i = 0; i < t->ncoll; i++)
      add(&sc, TR_STEP_COLL, i);
    add(&sc, TR_STEP_PAUSE, t->gap_us);
    add(&sc, TR_STEP_MEGA, 0);
    break;
  case TR_ORDER_MEGA_FIRST:
    add(&sc, TR_STEP_MEGA, 0);
    add(&sc, TR_STEP_PAUSE, t->gap_us);
    for(i = 0; i < t->ncoll; i++)
      add(&sc, TR_STEP_COLL, i);
    break;
  case TR_ORDER_BACK_TO_BACK:
  case TR_ORDER_CONCURRENT:
  default:
    for(i = 0; i <= t->ncoll; i++) {
      if(i == t->mega_at[rank]) {
        add(&sc, TR_STEP_MEGA, 0);
        if(i < t->ncoll)
          add(&sc, TR_STEP_PAUSE, t->gap_us);
      }
      if(i < t->ncoll) {
        add(&sc, TR_STEP_COLL, i);
        if(i + 1 < t->ncoll)
          add(&sc, TR_STEP_PAUSE, t->gap_us);
      }
    }
    break;
  }
  return sc.over ? -1 : sc.n;
}

void tr_plan_mix_of(tr_plan_mix *mix, uint64_t seed, int trials)
{
  tr_trial t;
  int i, j;

  memset(mix, 0, sizeof(*mix));
  for(i = 0; i < trials; i++) {
    tr_plan_trial(&t, seed, i);
    mix->orders[t.order]++;
    mix->tokens[t.tokens_i]++;
    for(j = 0; j < t.ncoll; j++) {
      mix->ops[t.coll[j].op]++;
      if(!mix->colls || t.coll[j].bytes < mix->min_bytes)
        mix->min_bytes = t.coll[j].bytes;
      if(t.coll[j].bytes > mix->max_bytes)
        mix->max_bytes = t.coll[j].bytes;
      mix->colls++;
    }
  }
}
