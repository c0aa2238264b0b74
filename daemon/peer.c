/*
 * peer.c: peer credentials and the operator check (see peer.h).
 */
#include <errno.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "hr_types.h"
#include "peer.h"

/* getgrnam_r scratch, grown on ERANGE, capped so a broken name service
 * cannot make us allocate without bound. */
#define NSS_BUF_FIRST 4096
#define NSS_BUF_MAX (1024 * 1024)
#define GROUPS_MAX 65536

int hr__peer_read(int fd, hr__peer *out)
{
  struct ucred cred;
  socklen_t len = sizeof(cred);

  if(!out || fd < 0)
    return HR_EINVAL;
  if(getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) ||
     len != sizeof(cred))
    return HR_EINTERNAL;
  out->pid = (int)cred.pid;
  out->uid = (int)cred.uid;
  out->gid = (int)cred.gid;
  return HR_OK;
}

static int all_digits(const char *s)
{
  if(!*s)
    return 0;
  for(; *s; s++)
    if(*s < '0' || *s > '9')
      return 0;
  return 1;
}

long hr__peer_group_gid(const char *group)
{
  struct group gr, *res = NULL;
  size_t size = NSS_BUF_FIRST;
  char *buf = NULL;
  long gid = -1;
  int e;

  if(!group || !*group)
    return -1;
  if(all_digits(group) && strlen(group) < 10)
    return strtol(group, NULL, 10);
  for(;;) {
    char *p = realloc(buf, size);
    if(!p)
      break;
    buf = p;
    e = getgrnam_r(group, &gr, buf, size, &res);
    if(e == ERANGE && size < NSS_BUF_MAX) {
      size *= 2;
      continue;
    }
    if(!e && res)
      gid = (long)res->gr_gid;
    break;
  }
  free(buf);
  return gid;
}

/* Whether the peer of `fd` had group `want` among its supplementary
 * groups when it connected. The kernel answers ERANGE with the size it
 * needs when the buffer is short; the list is capped, so a peer cannot
 * make us allocate without bound. */
static int peer_has_group(int fd, long want)
{
  gid_t small[64], *groups = small;
  socklen_t len = sizeof(small);
  size_t i, n;
  int found = 0;

  if(getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len)) {
    if(errno != ERANGE || len > GROUPS_MAX * sizeof(gid_t))
      return 0;
    groups = malloc(len);
    if(!groups)
      return 0;
    if(getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len))
      goto out;
  }
  n = len / sizeof(gid_t);
  for(i = 0; i < n; i++) {
    if((long)groups[i] == want) {
      found = 1;
      break;
    }
  }
out:
  if(groups != small)
    free(groups);
  return found;
}

int hr__peer_is_operator(const hr__peer *peer, int fd, long operator_gid)
{
  if(!peer)
    return 0;
  if(peer->uid == 0)
    return 1;
  if(operator_gid < 0)
    return 0;
  if((long)peer->gid == operator_gid)
    return 1;
  return fd >= 0 && peer_has_group(fd, operator_gid);
}
