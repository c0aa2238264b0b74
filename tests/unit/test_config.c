/*
 * test_config.c: headroomd's config file, flags and their layering.
 *
 * Every class of error must name the right line: an operator reading
 * "FILE:LINE: message" goes straight to that line, so a wrong number is
 * as bad as no message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "options.h"
#include "policy.h"

/* Parse `text` as file "t.conf" over the defaults; returns the rc and
 * leaves the message in `err`. */
static int parse(hr__config *cfg, const char *text, char *err, size_t n)
{
  hr__config_default(cfg);
  err[0] = '\0';
  return hr__config_parse(cfg, text, strlen(text), "t.conf", err, n);
}

/* Parse, then the cross-key checks, as a build would. */
static int parse_check(hr__config *cfg, const char *text, char *err, size_t n)
{
  int rc = parse(cfg, text, err, n);
  return rc ? rc : hr__config_check(cfg, err, n);
}

#define expect_error(text, prefix)                                        \
  do {                                                                    \
    hr__config cfg_;                                                      \
    char err_[HR__CONFIG_ERR_MAX];                                        \
    assert_int_equal(parse_check(&cfg_, (text), err_, sizeof(err_)),      \
                     HR_EINVAL);                                          \
    if(strncmp(err_, (prefix), strlen(prefix)))                           \
      fail_msg("error '%s' does not start with '%s'", err_, (prefix));    \
  } while(0)

/* ---- defaults ---------------------------------------------------------- */

static void test_defaults(void **state)
{
  hr__config cfg;
  hr_policy p;
  char err[HR__CONFIG_ERR_MAX];
  int k;

  (void)state;
  hr__config_default(&cfg);
  hr__policy_default(&p);
  assert_string_equal(cfg.socket, "/run/headroom/headroom.sock");
  assert_string_equal(cfg.socket, HR_DEFAULT_SOCKET);
  assert_int_equal(cfg.socket_mode, 0660);
  assert_string_equal(cfg.operator_group, "");
  assert_string_equal(cfg.state_dir, "/var/lib/headroom");
  assert_int_equal(cfg.log_level, HR_LOG_INFO);
  assert_int_equal(cfg.topology, HR_TOPOLOGY_AUTO);
  assert_int_equal(cfg.gpus, 0);
  assert_int_equal(cfg.sms, 132);
  assert_int_equal(cfg.policy.min_headroom, p.min_headroom);
  assert_int_equal(cfg.policy.max_headroom, p.max_headroom);
  assert_int_equal(cfg.policy.min_grid, p.min_grid);
  assert_int_equal(cfg.policy.incident_raise, 1);
  assert_int_equal(cfg.max_clients, 1024);
  assert_int_equal(cfg.max_comms_per_client, 64);
  assert_int_equal(cfg.max_leases_per_client, 16);
  assert_int_equal(cfg.write_queue_max, 1024 * 1024);
  assert_int_equal(cfg.max_clients_per_uid, 256);
  assert_int_equal(cfg.reserved_clients, 64);
  assert_int_equal(cfg.max_comms_per_uid, 512);
  assert_int_equal(cfg.max_comm_ctas_per_uid, 256);
  assert_int_equal(cfg.hello_timeout_ms, 5000);
  assert_int_equal(cfg.partition_ignore_coscheduling, 0);
  for(k = 0; k < HR_KEY_COUNT; k++)
    assert_int_equal(cfg.from[k], 0);
  /* The defaults pass the checks by themselves. */
  assert_int_equal(hr__config_check(&cfg, err, sizeof(err)), HR_OK);
}

static void test_empty_and_comments(void **state)
{
  hr__config cfg, def;
  char err[HR__CONFIG_ERR_MAX];

  (void)state;
  hr__config_default(&def);
  assert_int_equal(parse(&cfg, "", err, sizeof(err)), HR_OK);
  assert_int_equal(parse(&cfg, "\n\n   \n\t\n# only a comment\n"
                         "   # indented comment = not a key\n",
                         err, sizeof(err)), HR_OK);
  assert_string_equal(cfg.socket, def.socket);
  assert_int_equal(cfg.max_clients, def.max_clients);
}

/* ---- a full, valid file ------------------------------------------------ */

static const char full_file[] =
  "# headroomd test config\n"
  "socket = /tmp/hr test/headroom.sock\n"
  "socket_mode = 0600\n"
  "operator_group = hr-ops\n"
  "state_dir=/tmp/hr-state\n"
  "log_level = debug\n"
  "topology = config\n"
  "gpus = 4\n"
  "sms = 114\n"
  "gpu.2.sms = 132\n"
  "min_headroom = 4\n"
  "max_headroom = 40\n"
  "min_grid = 32\n"
  "incident_raise = no\n"
  "max_clients = 10\n"
  "max_comms_per_client = 3\n"
  "max_leases_per_client = 2\n"
  "write_queue_max = 2M\n"
  "partition_ignore_coscheduling = true\n";

static void test_full_file(void **state)
{
  hr__config cfg;
  char err[HR__CONFIG_ERR_MAX];

  (void)state;
  assert_int_equal(parse_check(&cfg, full_file, err, sizeof(err)), HR_OK);
  assert_string_equal(cfg.socket, "/tmp/hr test/headroom.sock");
  assert_int_equal(cfg.socket_mode, 0600);
  assert_string_equal(cfg.operator_group, "hr-ops");
  assert_string_equal(cfg.state_dir, "/tmp/hr-state");
  assert_int_equal(cfg.log_level, HR_LOG_DEBUG);
  assert_int_equal(cfg.topology, HR_TOPOLOGY_CONFIG);
  assert_int_equal(cfg.gpus, 4);
  assert_int_equal(cfg.sms, 114);
  assert_int_equal(cfg.gpu_sms[2], 132);
  assert_int_equal(cfg.gpu_sms[1], 0);
  assert_int_equal(cfg.policy.min_headroom, 4);
  assert_int_equal(cfg.policy.max_headroom, 40);
  assert_int_equal(cfg.policy.min_grid, 32);
  assert_int_equal(cfg.policy.incident_raise, 0);
  assert_int_equal(cfg.max_clients, 10);
  assert_int_equal(cfg.max_comms_per_client, 3);
  assert_int_equal(cfg.max_leases_per_client, 2);
  assert_int_equal(cfg.write_queue_max, 2 * 1024 * 1024);
  /* Provenance: the line each key came from. */
  assert_int_equal(cfg.from[HR_KEY_SOCKET], 2);
  assert_int_equal(cfg.from[HR_KEY_WRITE_QUEUE_MAX], 18);
  assert_int_equal(cfg.partition_ignore_coscheduling, 1);
  assert_int_equal(cfg.from[HR_KEY_PARTITION_IGNORE_COSCHEDULING], 19);
  assert_int_equal(cfg.gpu_sms_from[2], 10);
  assert_string_equal(cfg.file, "t.conf");
}

static void test_syntax_variants(void **state)
{
  hr__config cfg;
  char err[HR__CONFIG_ERR_MAX];

  (void)state;
  /* CRLF line ends, tabs, a trailing comment after whitespace, a '#'
   * inside a value, no final newline. */
  assert_int_equal(parse(&cfg, "socket\t=\t/run/a#b/s.sock   # where\r\n"
                         "incident_raise = yes # on\r\n"
                         "write_queue_max = 65536", err, sizeof(err)), HR_OK);
  assert_string_equal(cfg.socket, "/run/a#b/s.sock");
  assert_int_equal(cfg.policy.incident_raise, 1);
  assert_int_equal(cfg.write_queue_max, 65536);
  /* Size suffixes. */
  assert_int_equal(parse(&cfg, "write_queue_max = 512k\n", err, sizeof(err)),
                   HR_OK);
  assert_int_equal(cfg.write_queue_max, 512 * 1024);
  assert_int_equal(parse(&cfg, "write_queue_max = 1G\n", err, sizeof(err)),
                   HR_OK);
  assert_int_equal(cfg.write_queue_max, 1024L * 1024 * 1024);
  /* A numeric operator group and octal mode without the leading 0. */
  assert_int_equal(parse(&cfg, "operator_group = 1234\nsocket_mode = 666\n",
                         err, sizeof(err)), HR_OK);
  assert_string_equal(cfg.operator_group, "1234");
  assert_int_equal(cfg.socket_mode, 0666);
  /* Booleans: yes/no or true/false, for either key. */
  assert_int_equal(parse(&cfg, "incident_raise = false\n"
                         "partition_ignore_coscheduling = yes\n", err,
                         sizeof(err)), HR_OK);
  assert_int_equal(cfg.policy.incident_raise, 0);
  assert_int_equal(cfg.partition_ignore_coscheduling, 1);
  assert_int_equal(parse(&cfg, "partition_ignore_coscheduling = false\n",
                         err, sizeof(err)), HR_OK);
  assert_int_equal(cfg.partition_ignore_coscheduling, 0);
}

/* ---- every class of error, with its line ------------------------------- */

static void test_unknown_key(void **state)
{
  (void)state;
  expect_error("gpus = 2\n\nsocket_path = /x\n", "t.conf:3: unknown key "
               "'socket_path'");
  expect_error("# c\nGPUS = 2\n", "t.conf:2: unknown key 'GPUS'");
  expect_error("gpu.x.sms = 3\n", "t.conf:1: bad key 'gpu.x.sms'");
  expect_error("gpu.64.sms = 3\n", "t.conf:1: bad key 'gpu.64.sms'");
  expect_error("gpu.01.sms = 3\n", "t.conf:1: bad key");
  expect_error("gpu.1.smss = 3\n", "t.conf:1: unknown key");
}

static void test_bad_values(void **state)
{
  (void)state;
  expect_error("gpus = 0\n", "t.conf:1: bad gpus '0'");
  expect_error("\ngpus = 65\n", "t.conf:2: bad gpus '65'");
  expect_error("gpus = -1\n", "t.conf:1: bad gpus");
  expect_error("gpus = 2x\n", "t.conf:1: bad gpus");
  expect_error("gpus = 1e1\n", "t.conf:1: bad gpus");
  expect_error("gpus = 99999999999999999999\n", "t.conf:1: bad gpus");
  expect_error("sms = 1025\n", "t.conf:1: bad sms");
  expect_error("sms = 0\n", "t.conf:1: bad sms");
  expect_error("gpus = 2\ngpu.1.sms = 2000\n", "t.conf:2: bad gpu.1.sms");
  expect_error("socket_mode = 0888\n", "t.conf:1: bad socket_mode");
  expect_error("socket_mode = 01777\n", "t.conf:1: bad socket_mode");
  expect_error("socket_mode = rw\n", "t.conf:1: bad socket_mode");
  expect_error("log_level = loud\n", "t.conf:1: bad log_level 'loud'");
  expect_error("log_level = INFO\n", "t.conf:1: bad log_level");
  expect_error("topology = nvml\n", "t.conf:1: bad topology 'nvml'");
  expect_error("incident_raise = maybe\n", "t.conf:1: bad incident_raise");
  expect_error("incident_raise = 1\n", "t.conf:1: bad incident_raise");
  expect_error("partition_ignore_coscheduling = 1\n",
               "t.conf:1: bad partition_ignore_coscheduling '1' "
               "(true or false)");
  expect_error("# fine steps\n\npartition_ignore_coscheduling = TRUE\n",
               "t.conf:3: bad partition_ignore_coscheduling 'TRUE'");
  expect_error("min_headroom = 2000\n", "t.conf:1: bad min_headroom");
  expect_error("max_headroom = -3\n", "t.conf:1: bad max_headroom");
  expect_error("min_grid = 0\n", "t.conf:1: bad min_grid");
  expect_error("max_clients = 0\n", "t.conf:1: bad max_clients");
  expect_error("max_comms_per_client = 100000\n",
               "t.conf:1: bad max_comms_per_client");
  expect_error("max_leases_per_client = x\n",
               "t.conf:1: bad max_leases_per_client");
  expect_error("max_clients_per_uid = 0\n",
               "t.conf:1: bad max_clients_per_uid '0' (1..65536)");
  expect_error("reserved_clients = 40000\n",
               "t.conf:1: bad reserved_clients '40000' (0..32768)");
  expect_error("max_comms_per_uid = 0\n", "t.conf:1: bad max_comms_per_uid");
  expect_error("max_comm_ctas_per_uid = -1\n",
               "t.conf:1: bad max_comm_ctas_per_uid");
  /* A deadline of 0 would close every connection before its hello. */
  expect_error("hello_timeout_ms = 0\n",
               "t.conf:1: bad hello_timeout_ms '0' (10..600000)");
  /* One reply must always fit a client's queue. */
  expect_error("write_queue_max = 1K\n", "t.conf:1: bad write_queue_max");
  expect_error("write_queue_max = 2T\n", "t.conf:1: bad write_queue_max");
  expect_error("write_queue_max = 5G\n", "t.conf:1: bad write_queue_max");
  expect_error("operator_group = a b\n", "t.conf:1: bad operator_group");
  expect_error("operator_group = -x\n", "t.conf:1: bad operator_group");
}

static void test_paths(void **state)
{
  char text[512];

  (void)state;
  /* sun_path holds 107 bytes and a '\0'. */
  snprintf(text, sizeof(text), "socket = /%0120d\n", 0);
  expect_error(text, "t.conf:1: path longer than");
  expect_error("state_dir = /a\x01" "b\n", "t.conf:1: control character");
}

static void test_syntax_errors(void **state)
{
  char big[5000];

  (void)state;
  expect_error("gpus = 2\njust words\n", "t.conf:2: expected 'key = value'");
  expect_error("gpus =\n", "t.conf:1: missing value for 'gpus'");
  expect_error("gpus = # nothing\n", "t.conf:1: missing value for 'gpus'");
  expect_error("\n\n = 3\n", "t.conf:3: missing key");
  memset(big, 'x', sizeof(big));
  memcpy(big, "socket = /", 10);
  big[sizeof(big) - 1] = '\0';
  expect_error(big, "t.conf:1: line longer than");
}

static void test_nul_byte(void **state)
{
  hr__config cfg;
  char err[HR__CONFIG_ERR_MAX];
  static const char text[] = "gpus = 2\nsms = 1\0" "32\n";

  (void)state;
  hr__config_default(&cfg);
  assert_int_equal(hr__config_parse(&cfg, text, sizeof(text) - 1, "t.conf",
                                    err, sizeof(err)), HR_EINVAL);
  assert_string_equal(err, "t.conf:2: NUL byte in line");
}

static void test_duplicates(void **state)
{
  (void)state;
  expect_error("gpus = 2\nsms = 100\n# x\ngpus = 3\n",
               "t.conf:4: duplicate key 'gpus' (first set on line 1)");
  expect_error("gpus = 4\ngpu.1.sms = 100\ngpu.1.sms = 90\n",
               "t.conf:3: duplicate key 'gpu.1.sms' (first set on line 2)");
  /* Each gpu.N.sms is its own key. */
  {
    hr__config cfg;
    char err[HR__CONFIG_ERR_MAX];
    assert_int_equal(parse_check(&cfg, "gpus = 4\ngpu.1.sms = 100\n"
                                 "gpu.3.sms = 90\n", err, sizeof(err)),
                     HR_OK);
  }
}

static void test_cross_checks(void **state)
{
  (void)state;
  /* The line of the key that points past the GPUs. */
  expect_error("gpus = 2\nsms = 100\ngpu.2.sms = 90\n",
               "t.conf:3: gpu.2.sms: no GPU 2 (gpus = 2)");
  expect_error("# x\ngpu.0.sms = 90\n",
               "t.conf:2: gpu.0.sms needs 'gpus' to be set");
  expect_error("log_level = info\ntopology = config\n",
               "t.conf:2: topology = config needs 'gpus'");
  /* min over max: blamed on whichever came last. */
  expect_error("max_headroom = 4\nmin_headroom = 8\n",
               "t.conf:2: min_headroom (8) exceeds max_headroom (4)");
  expect_error("min_headroom = 8\n\nmax_headroom = 4\n",
               "t.conf:3: min_headroom (8) exceeds max_headroom (4)");
  /* Against a default: the one line that was written. */
  expect_error("\nmin_headroom = 40\n",
               "t.conf:2: min_headroom (40) exceeds max_headroom (32)");
}

static void test_first_error_wins(void **state)
{
  (void)state;
  expect_error("gpus = 2\nbogus = 1\ngpus = 0\n", "t.conf:2: unknown key");
}

/* ---- files and flags --------------------------------------------------- */

static char *write_temp(const char *text)
{
  char *path = strdup("/tmp/hr-test-config-XXXXXX");
  int fd = mkstemp(path);
  size_t len = strlen(text);

  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  close(fd);
  return path;
}

static void test_build_with_flags(void **state)
{
  hr__config cfg;
  hr__config_flags flags;
  char err[HR__CONFIG_ERR_MAX];
  char *path = write_temp("socket = /run/file.sock\nstate_dir = /var/x\n"
                          "log_level = err\ntopology = default\n"
                          "gpus = 2\n");

  (void)state;
  memset(&flags, 0, sizeof(flags));
  flags.config = path;
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)), HR_OK);
  assert_string_equal(cfg.socket, "/run/file.sock");
  assert_int_equal(cfg.log_level, HR_LOG_ERR);
  assert_string_equal(cfg.file, path);

  /* Flags win over the file, and are recorded as flags. */
  flags.socket = "/tmp/flag.sock";
  flags.state_dir = "/tmp/flag-state";
  flags.log_level = "debug";
  flags.topology = "config";
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)), HR_OK);
  assert_string_equal(cfg.socket, "/tmp/flag.sock");
  assert_string_equal(cfg.state_dir, "/tmp/flag-state");
  assert_int_equal(cfg.log_level, HR_LOG_DEBUG);
  assert_int_equal(cfg.topology, HR_TOPOLOGY_CONFIG);
  assert_int_equal(cfg.from[HR_KEY_SOCKET], HR__FROM_FLAG);
  assert_int_equal(cfg.gpus, 2); /* untouched by flags */

  /* A bad flag is named as the flag. */
  flags.log_level = "chatty";
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)),
                   HR_EINVAL);
  assert_string_equal(err, "--log-level: bad log_level 'chatty' "
                      "(err, warning, notice, info or debug)");
  flags.log_level = NULL;
  flags.topology = "gpus";
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)),
                   HR_EINVAL);
  assert_true(strncmp(err, "--topology: bad topology", 24) == 0);
  unlink(path);
  free(path);
}

static void test_flag_cross_check(void **state)
{
  hr__config cfg;
  hr__config_flags flags;
  char err[HR__CONFIG_ERR_MAX];
  char *path = write_temp("# no gpus here\n");

  (void)state;
  memset(&flags, 0, sizeof(flags));
  flags.config = path;
  flags.topology = "config";
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)),
                   HR_EINVAL);
  assert_string_equal(err, "--topology: topology = config needs 'gpus' in "
                      "the config file");
  unlink(path);
  free(path);
}

static void test_build_file_error(void **state)
{
  hr__config cfg;
  hr__config_flags flags;
  char err[HR__CONFIG_ERR_MAX], want[HR__CONFIG_ERR_MAX];
  char *path = write_temp("gpus = 2\nsms = 100\nmin_grid = nope\n");

  (void)state;
  memset(&flags, 0, sizeof(flags));
  flags.config = path;
  flags.socket = "/tmp/x.sock"; /* a good flag does not hide the error */
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)),
                   HR_EINVAL);
  snprintf(want, sizeof(want), "%s:3: bad min_grid 'nope' (1..1024)", path);
  assert_string_equal(err, want);
  unlink(path);
  free(path);
}

static void test_missing_files(void **state)
{
  hr__config cfg;
  hr__config_flags flags;
  char err[HR__CONFIG_ERR_MAX];

  (void)state;
  /* An explicit file that is not there is an error naming it. */
  memset(&flags, 0, sizeof(flags));
  flags.config = "/nonexistent/headroomd.conf";
  assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)),
                   HR_EINVAL);
  assert_non_null(strstr(err, "/nonexistent/headroomd.conf"));
  /* hr__config_load itself tells "missing" apart. */
  hr__config_default(&cfg);
  assert_int_equal(hr__config_load(&cfg, "/nonexistent/x.conf", err,
                                   sizeof(err)), HR_ENOTFOUND);
  /* The default file may be absent: defaults then (only checkable where
   * none is installed). */
  if(access(HR__DEFAULT_CONFIG, F_OK) != 0) {
    memset(&flags, 0, sizeof(flags));
    flags.socket = "/tmp/only-a-flag.sock";
    assert_int_equal(hr__config_build(&cfg, &flags, err, sizeof(err)),
                     HR_OK);
    assert_string_equal(cfg.file, "");
    assert_string_equal(cfg.socket, "/tmp/only-a-flag.sock");
    assert_int_equal(cfg.max_clients, HR__DEFAULT_MAX_CLIENTS);
  }
}

static void test_setter(void **state)
{
  hr__config cfg;
  char why[HR__CONFIG_ERR_MAX];

  (void)state;
  hr__config_default(&cfg);
  assert_int_equal(hr__config_set(&cfg, "gpus", "8", 7, why, sizeof(why)),
                   HR_OK);
  assert_int_equal(cfg.gpus, 8);
  assert_int_equal(cfg.from[HR_KEY_GPUS], 7);
  assert_int_equal(hr__config_set(&cfg, "nope", "1", 1, why, sizeof(why)),
                   HR_EINVAL);
  assert_string_equal(why, "unknown key 'nope'");
  /* A failed set leaves the old value. */
  assert_int_equal(hr__config_set(&cfg, "gpus", "100", 9, why, sizeof(why)),
                   HR_EINVAL);
  assert_int_equal(cfg.gpus, 8);
  assert_int_equal(cfg.from[HR_KEY_GPUS], 7);
  assert_string_equal(hr__config_key_name(HR_KEY_WRITE_QUEUE_MAX),
                      "write_queue_max");
  assert_null(hr__config_key_name(HR_KEY_COUNT));
  assert_string_equal(hr__topology_mode_name(HR_TOPOLOGY_CUDA), "cuda");
}

/* ---- argv -------------------------------------------------------------- */

static void test_options(void **state)
{
  hr__options o;
  char err[256];
  char *run[] = {"headroomd", "--config", "/etc/x.conf", "--socket",
                 "/tmp/s", "--state-dir", "/tmp/d", "--log-level", "debug",
                 "--topology", "config", NULL};
  char *check[] = {"headroomd", "--check-config", "-c", "/a.conf", NULL};
  char *help[] = {"headroomd", "--help", NULL};
  char *version[] = {"headroomd", "-V", NULL};
  char *unknown[] = {"headroomd", "--sokcet", "/x", NULL};
  char *missing[] = {"headroomd", "--socket", NULL};
  char *stray[] = {"headroomd", "extra", NULL};

  (void)state;
  assert_int_equal(hr__options_parse(&o, 11, run, err, sizeof(err)), HR_OK);
  assert_int_equal(o.action, HR_ACTION_RUN);
  assert_string_equal(o.flags.config, "/etc/x.conf");
  assert_string_equal(o.flags.socket, "/tmp/s");
  assert_string_equal(o.flags.state_dir, "/tmp/d");
  assert_string_equal(o.flags.log_level, "debug");
  assert_string_equal(o.flags.topology, "config");

  assert_int_equal(hr__options_parse(&o, 4, check, err, sizeof(err)), HR_OK);
  assert_int_equal(o.action, HR_ACTION_CHECK_CONFIG);
  assert_string_equal(o.flags.config, "/a.conf");
  assert_null(o.flags.socket);

  assert_int_equal(hr__options_parse(&o, 2, help, err, sizeof(err)), HR_OK);
  assert_int_equal(o.action, HR_ACTION_HELP);
  assert_int_equal(hr__options_parse(&o, 2, version, err, sizeof(err)),
                   HR_OK);
  assert_int_equal(o.action, HR_ACTION_VERSION);

  assert_int_equal(hr__options_parse(&o, 3, unknown, err, sizeof(err)),
                   HR_EINVAL);
  assert_non_null(strstr(err, "--sokcet"));
  assert_int_equal(hr__options_parse(&o, 2, missing, err, sizeof(err)),
                   HR_EINVAL);
  assert_string_equal(err, "unknown or incomplete option '--socket'");
  assert_int_equal(hr__options_parse(&o, 2, stray, err, sizeof(err)),
                   HR_EINVAL);
  assert_string_equal(err, "unexpected argument 'extra'");
}

/* --help documents every key of the file. */
static void test_usage_lists_keys(void **state)
{
  char buf[8192];
  FILE *f = fmemopen(buf, sizeof(buf), "w");
  int k;

  (void)state;
  assert_non_null(f);
  hr__options_usage(f);
  fclose(f);
  buf[sizeof(buf) - 1] = '\0';
  for(k = 0; k < HR_KEY_COUNT; k++) {
    char key[64];
    snprintf(key, sizeof(key), "  %s = ", hr__config_key_name(k));
    if(!strstr(buf, key))
      fail_msg("--help does not document '%s'", hr__config_key_name(k));
  }
  assert_non_null(strstr(buf, "gpu.N.sms = "));
  assert_non_null(strstr(buf, "--check-config"));
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_defaults),
    cmocka_unit_test(test_empty_and_comments),
    cmocka_unit_test(test_full_file),
    cmocka_unit_test(test_syntax_variants),
    cmocka_unit_test(test_unknown_key),
    cmocka_unit_test(test_bad_values),
    cmocka_unit_test(test_paths),
    cmocka_unit_test(test_syntax_errors),
    cmocka_unit_test(test_nul_byte),
    cmocka_unit_test(test_duplicates),
    cmocka_unit_test(test_cross_checks),
    cmocka_unit_test(test_first_error_wins),
    cmocka_unit_test(test_build_with_flags),
    cmocka_unit_test(test_flag_cross_check),
    cmocka_unit_test(test_build_file_error),
    cmocka_unit_test(test_missing_files),
    cmocka_unit_test(test_setter),
    cmocka_unit_test(test_options),
    cmocka_unit_test(test_usage_lists_keys),
  };

  return cmocka_run_group_tests(tests, NULL, NULL);
}
