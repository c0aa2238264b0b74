/*
 * skip_stub.c: what each GPU test is when the tree was built without nvcc:
 * there is no kernel to test, so it says so and skips (exit 77), naming
 * what else is missing here (driver, device) so that a reader knows
 * whether installing the CUDA toolkit is the whole answer.
 */
#include <stdio.h>

#include "gpu_probe.h"

#ifndef GT_NAME
#define GT_NAME "gpu test"
#endif

int main(void)
{
  char why[256];
  int n;

  if(gt_probe_cuda(why, sizeof(why), &n))
    printf("SKIP: %s: built without nvcc (no kernels: make kernels); "
           "also %s\n", GT_NAME, why);
  else
    printf("SKIP: %s: built without nvcc (no kernels: install the CUDA "
           "toolkit, then make kernels); %d CUDA device%s here\n", GT_NAME,
           n, n == 1 ? "" : "s");
  return 77;
}
