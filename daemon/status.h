/*
 * status.h: the reply to "status", built from the daemon's live state.
 */
#ifndef HR_DAEMON_STATUS_H
#define HR_DAEMON_STATUS_H

#include "daemon.h"
#include "hr_proto.h"

/* Fill `st` with the status `detail` asks for: every list (full), or
 * the counts alone (summary; no array is allocated). Counts are filled in
 * both. Arrays are malloc'd; free with hr_status_free. On failure nothing
 * is left allocated. */
int hr__status_build(hr__daemon *d, hr_status_detail detail, hr_status *st);

#endif /* HR_DAEMON_STATUS_H */
