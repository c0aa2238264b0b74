/*
 * peer.h: who is on the other end of a connection, and may they operate.
 *
 * Credentials come from the kernel, as the peer had them when it
 * connected (SO_PEERCRED for its uid and gid, SO_PEERGROUPS for its
 * supplementary groups), so a client cannot claim to be someone else and
 * the check reads no user or group database. An operator is root or a
 * process in the operator group, as its primary or a supplementary group.
 * The group's name is turned into a gid once, when the config is loaded
 * (hr__peer_group_gid): never on the event loop for a connection.
 */
#ifndef HR_DAEMON_PEER_H
#define HR_DAEMON_PEER_H

typedef struct hr__peer {
  int pid, uid, gid;
} hr__peer;

/* SO_PEERCRED of a connected Unix socket. HR_EINTERNAL on failure. */
int hr__peer_read(int fd, hr__peer *out);

/* 1 when `peer` may make operator requests, else 0: root, or a peer whose
 * primary gid is `operator_gid` or, read from the socket `fd` (-1: none,
 * for a connection with no socket), whose supplementary groups hold it.
 * `operator_gid` < 0: root only. Anything that cannot be read counts as
 * "not an operator". */
int hr__peer_is_operator(const hr__peer *peer, int fd, long operator_gid);

/* The gid `group` names (a name, looked up in the group database, or a
 * number); -1 when `group` is "" or no such group. Blocking: called at
 * config load and reload only. */
long hr__peer_group_gid(const char *group);

#endif /* HR_DAEMON_PEER_H */
