/*
 * hr_version.c: the version of the library a program runs against, which
 * can differ from the header it was built with (HR_VERSION_*).
 */
#include "headroom.h"

unsigned hr_version(void)
{
  return HR_VERSION_HEX;
}

const char *hr_version_string(void)
{
  return HR_VERSION_STRING;
}
