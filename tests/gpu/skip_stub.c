/*
 * skip_stub.c: what each GPU test is when the tree was built without nvcc:
 * there is no kernel to test, so it says so and skips (exit 77).
 */
#include <stdio.h>

#ifndef GT_NAME
#define GT_NAME "gpu test"
#endif

int main(void)
{
  printf("SKIP: %s: no CUDA device (built without nvcc: no kernels)\n", GT_NAME);
  return 77;
}
