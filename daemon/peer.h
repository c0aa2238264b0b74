/*
 * peer.h: who is on the other end of a connection, and may they operate.
 *
 * Credentials come from the kernel (SO_PEERCRED at accept), so a client
 * cannot claim to be someone else. An operator is root or a member of the
 * configured operator group, as primary or supplementary group.
 */
#ifndef HR_DAEMON_PEER_H
#define HR_DAEMON_PEER_H

typedef struct hr__peer {
  int pid, uid, gid;
} hr__peer;

/* SO_PEERCRED of a connected Unix socket. HR_EINTERNAL on failure. */
int hr__peer_read(int fd, hr__peer *out);

/* 1 when `peer` may make operator requests under `operator_group` (a
 * group name, a numeric gid, or "" for root only), else 0. */
int hr__peer_is_operator(const hr__peer *peer, const char *operator_group);

/* The gid `group` names (name or number); -1 when no such group. */
long hr__peer_group_gid(const char *group);

#endif /* HR_DAEMON_PEER_H */
