/*
 * trials_daemon.c: see trials_daemon.h.
 */
#include "trials_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "gpu_util.h"
#include "headroom.h"

static void describe(int status, char *why, size_t n)
{
  if(WIFEXITED(status))
    snprintf(why, n, "headroomd exited with status %d", WEXITSTATUS(status));
  else if(WIFSIGNALED(status))
    snprintf(why, n, "headroomd was killed by signal %d (%s)",
             WTERMSIG(status), strsignal(WTERMSIG(status)));
  else
    snprintf(why, n, "headroomd ended with wait status %d", status);
}

int tr_daemon_start(tr_daemon *d, const char *bin, const char *dir,
                    const char *config, char *why, size_t n)
{
  char conf[512], state[512];
  hr_client_options o;
  FILE *f;
  int i;

  memset(d, 0, sizeof(*d));
  snprintf(conf, sizeof(conf), "%s/headroomd.conf", dir);
  snprintf(state, sizeof(state), "%s/state", dir);
  snprintf(d->socket, sizeof(d->socket), "%s/headroom.sock", dir);
  snprintf(d->log, sizeof(d->log), "%s/headroomd.log", dir);
  f = fopen(conf, "w");
  if(!f || fputs(config, f) < 0 || fclose(f) != 0) {
    snprintf(why, n, "cannot write %s: %s", conf, strerror(errno));
    return -1;
  }
  if(mkdir(state, 0700) && errno != EEXIST) {
    snprintf(why, n, "mkdir %s: %s", state, strerror(errno));
    return -1;
  }
  d->pid = fork();
  if(d->pid < 0) {
    snprintf(why, n, "fork: %s", strerror(errno));
    d->pid = 0;
    return -1;
  }
  if(d->pid == 0) {
    int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if(fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execl(bin, bin, "--config", conf, "--socket", d->socket, "--state-dir",
          state, (char *)NULL);
    _exit(127);
  }
  memset(&o, 0, sizeof(o));
  o.quiet = 1;
  o.name = "overlap-trials probe";
  for(i = 0; i < 200; i++) {
    hr_client *c = NULL;
    if(!tr_daemon_alive(d, why, n))
      return -1;
    if(access(d->socket, F_OK) == 0 && hr_client_open(&c, d->socket, &o) == HR_OK) {
      int up = hr_client_connected(c);
      hr_client_close(c);
      if(up)
        return 0;
    }
    gt_sleep_ms(50);
  }
  snprintf(why, n, "headroomd did not answer on %s within 10 s", d->socket);
  tr_daemon_stop(d, why + strlen(why), n - strlen(why));
  return -1;
}

int tr_daemon_alive(tr_daemon *d, char *why, size_t n)
{
  int st;

  if(d->pid <= 0) {
    snprintf(why, n, "headroomd is not running");
    return 0;
  }
  if(waitpid(d->pid, &st, WNOHANG) == d->pid) {
    d->pid = 0;
    describe(st, why, n);
    return 0;
  }
  return 1;
}

int tr_daemon_stop(tr_daemon *d, char *why, size_t n)
{
  int st, i;

  if(!tr_daemon_alive(d, why, n))
    return -1;                          /* it had ended by itself */
  kill(d->pid, SIGTERM);
  for(i = 0; i < 1000; i++) {
    if(waitpid(d->pid, &st, WNOHANG) == d->pid) {
      d->pid = 0;
      if(WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
      describe(st, why, n);
      return -1;
    }
    gt_sleep_ms(10);
  }
  kill(d->pid, SIGKILL);
  waitpid(d->pid, &st, 0);
  d->pid = 0;
  snprintf(why, n, "headroomd did not exit within 10 s of SIGTERM");
  return -1;
}

void tr_daemon_log_tail(const tr_daemon *d, int lines)
{
  char **ring = calloc((size_t)lines, sizeof(char *));
  char line[1024];
  FILE *f = fopen(d->log, "r");
  int i, at = 0, seen = 0;

  if(!f || !ring) {
    if(f)
      fclose(f);
    free(ring);
    return;
  }
  while(fgets(line, sizeof(line), f)) {
    free(ring[at]);
    ring[at] = strdup(line);
    at = (at + 1) % lines;
    seen++;
  }
  fclose(f);
  printf("---- the last %d lines of %s\n", seen < lines ? seen : lines, d->log);
  for(i = 0; i < lines; i++) {
    char *l = ring[(at + i) % lines];
    if(l)
      fputs(l, stdout);
    free(l);
  }
  free(ring);
}

/* stdout of `argv` (at most cap - 1 bytes); its exit status in *status. */
static int capture(char *const argv[], char *out, size_t cap, int *status)
{
  int p[2];
  size_t len = 0;
  pid_t pid;

  if(pipe(p))
    return -1;
  pid = fork();
  if(pid < 0) {
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if(pid == 0) {
    dup2(p[1], 1);
    close(p[0]);
    close(p[1]);
    execv(argv[0], argv);
    _exit(127);
  }
  close(p[1]);
  for(;;) {
    ssize_t got = read(p[0], out + len, cap - 1 - len);
    if(got < 0 && errno == EINTR)
      continue;
    if(got <= 0)
      break;
    len += (size_t)got;
    if(len == cap - 1)
      break;
  }
  out[len] = '\0';
  close(p[0]);
  waitpid(pid, status, 0);
  return 0;
}

static int num(const cJSON *o, const char *key, int *out)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  if(!cJSON_IsNumber(v))
    return -1;
  *out = v->valueint;
  return 0;
}

int tr_daemon_gpu_metrics(const char *ctl, const char *socket, int gpu,
                          tr_gpu_metrics *out, char *why, size_t n)
{
  char *argv[] = { (char *)ctl, "--socket", (char *)socket, "metrics",
                   "--json", NULL };
  const cJSON *m, *gpus, *g, *inc;
  cJSON *root = NULL;
  char *text = malloc(1 << 20);
  int st = 0, rc = -1;

  memset(out, 0, sizeof(*out));
  if(!text || capture(argv, text, 1 << 20, &st)) {
    snprintf(why, n, "cannot run %s", ctl);
    goto out;
  }
  if(!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    snprintf(why, n, "%s metrics --json failed (wait status %d)", ctl, st);
    goto out;
  }
  root = cJSON_Parse(text);
  /* The protocol's reply, {"type":"metrics","metrics":{...}}; or the bare
   * object, should headroomctl ever print only that. */
  m = cJSON_GetObjectItemCaseSensitive(root, "metrics");
  if(!m)
    m = root;
  gpus = cJSON_GetObjectItemCaseSensitive(m, "gpus");
  cJSON_ArrayForEach(g, gpus) {
    int index = -1;
    if(num(g, "index", &index) || index != gpu)
      continue;
    inc = cJSON_GetObjectItemCaseSensitive(g, "incidents");
    if(num(g, "headroom", &out->headroom) || num(g, "grid", &out->grid) ||
       num(g, "epoch", &out->epoch) ||
       num(g, "nccl_max_ctas", &out->nccl_max_ctas) ||
       num(g, "raised", &out->raised) ||
       num(g, "comm_ctas", &out->comm_ctas) ||
       num(inc, "barrier_timeout", &out->barrier_timeouts)) {
      snprintf(why, n, "GPU %d of headroomctl's metrics lacks a field", gpu);
      goto out;
    }
    rc = 0;
    goto out;
  }
  snprintf(why, n, "no GPU %d in headroomctl's metrics: %.200s", gpu, text);
out:
  cJSON_Delete(root);
  free(text);
  return rc;
}
