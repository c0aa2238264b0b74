/*
 * peer.c: peer credentials and the operator check (see peer.h).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "hr_types.h"
#include "peer.h"

/* getpwuid_r/getgrnam_r scratch: sysconf's hint, grown on ERANGE, capped
 * so a broken name service cannot make us allocate without bound. */
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

/* Whether user `uid` (primary group `gid`) is in group `want`, counting
 * the supplementary groups of its passwd entry. */
static int user_in_group(int uid, int gid, long want)
{
  struct passwd pw, *res = NULL;
  size_t size = NSS_BUF_FIRST;
  char *buf = NULL;
  gid_t *groups = NULL;
  int found = 0, n, i, e;

  if(gid == want)
    return 1;
  for(;;) {
    char *p = realloc(buf, size);
    if(!p)
      goto out;
    buf = p;
    e = getpwuid_r((uid_t)uid, &pw, buf, size, &res);
    if(e == ERANGE && size < NSS_BUF_MAX) {
      size *= 2;
      continue;
    }
    if(e || !res)
      goto out; /* no passwd entry: only the primary gid counted */
    break;
  }
  if((long)pw.pw_gid == want) {
    found = 1;
    goto out;
  }
  n = 64;
  for(;;) {
    int got = n;
    gid_t *g = realloc(groups, (size_t)n * sizeof(*g));
    if(!g)
      goto out;
    groups = g;
    if(getgrouplist(pw.pw_name, pw.pw_gid, groups, &got) >= 0) {
      n = got;
      break;
    }
    if(got <= n || got > GROUPS_MAX)
      goto out;
    n = got;
  }
  for(i = 0; i < n; i++) {
    if((long)groups[i] == want) {
      found = 1;
      break;
    }
  }
out:
  free(groups);
  free(buf);
  return found;
}

int hr__peer_is_operator(const hr__peer *peer, const char *operator_group)
{
  long want;

  if(!peer)
    return 0;
  if(peer->uid == 0)
    return 1;
  want = hr__peer_group_gid(operator_group);
  if(want < 0)
    return 0;
  return user_in_group(peer->uid, peer->gid, want);
}
