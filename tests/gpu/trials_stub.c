/*
 * trials_stub.c: test_overlap_trials where the tree was built without
 * nvcc or without NCCL's header: it says which, and skips (exit 77).
 */
#include <stdio.h>

#ifndef TR_WHY
#define TR_WHY "built without nvcc or nccl.h"
#endif

int main(void)
{
  printf("SKIP: test_overlap_trials: %s\n", TR_WHY);
  return 77;
}
