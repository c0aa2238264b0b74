/*
 * hr_error.c: names for the HR_E* codes of hr_types.h (hr_strerror, public in
 * libheadroom, and used by the daemon for its log lines).
 */
#include "hr_types.h"

const char *hr_strerror(int err)
{
  switch(err) {
  case HR_OK: return "success";
  case HR_EINVAL: return "invalid argument";
  case HR_ENOMEM: return "out of memory";
  case HR_ECONNECT: return "no daemon answered on the socket";
  case HR_EPROTO: return "protocol error";
  case HR_EVERSION: return "no protocol version in common with the daemon";
  case HR_EPERM: return "permission denied";
  case HR_ENOTFOUND: return "no such GPU, footprint or lease";
  case HR_ELIMIT: return "limit reached";
  case HR_ETIMEDOUT: return "timed out (the daemon did not answer, or a bounded wait ran out)";
  case HR_ECLOSED: return "connection closed";
  case HR_EDEGRADED: return "no daemon connected (running on the fallback)";
  case HR_ETOOLARGE: return "message too large";
  case HR_EINTERNAL: return "internal error in the daemon";
  case HR_EUNSUPPORTED: return "not supported";
  case HR_ESHUTDOWN: return "the daemon is shutting down";
  case HR_EHELLO: return "request sent before hello";
  case HR_ENOGPU: return "no CUDA driver or device";
  case HR_ECUDA: return "CUDA call failed";
  case HR_EBARRIER_TIMEOUT: return "grid barrier timed out";
  case HR_ECOOP_TOO_LARGE: return "cooperative grid larger than the device";
  case HR_EABORTED: return "kernel aborted";
  }
  return "unknown error";
}
