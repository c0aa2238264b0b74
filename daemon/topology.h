/*
 * topology.h: which GPUs this node has and how many SMs each.
 *
 * CUDA is loaded at run time (dlopen of libcuda.so.1), so headroomd builds
 * and runs on machines with no driver; the config file and the embedded
 * default (8 GPUs x 132 SMs, an H100/H200 SXM node) stand in.
 */
#ifndef HR_DAEMON_TOPOLOGY_H
#define HR_DAEMON_TOPOLOGY_H

#include "config.h"
#include "hr_proto.h"

/* Read the topology the config asks for. `why` gets one line saying
 * which source was used and why the others were not, for the start-up
 * announcement. HR_ENOGPU when `topology = cuda` and CUDA has no device. */
int hr__topology_detect(const hr__config *cfg, hr_topology *topo, char *why,
                        size_t n);

/* Query the CUDA driver only. HR_ENOGPU with the reason in `why` when
 * there is no driver or no device. */
int hr__topology_from_cuda(hr_topology *topo, char *why, size_t n);

/* The config's gpus/sms/gpu.N.sms (gpus must be set). */
void hr__topology_from_config(const hr__config *cfg, hr_topology *topo);

/* The embedded default. */
void hr__topology_default(hr_topology *topo);

#endif /* HR_DAEMON_TOPOLOGY_H */
