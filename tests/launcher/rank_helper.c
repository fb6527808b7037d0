/* A rank program for the oslo-run tests.
 *
 *   rank_helper DIR [RULE...] [-- ARG...]
 *
 * Every rank writes, each atomically (temporary file + rename):
 *   DIR/<RANK>.env   its whole environment, NUL-separated
 *   DIR/<RANK>.args  its argv[1..], NUL-separated
 *   DIR/<RANK>.pid   its pid (written last: once it is there, the rank's
 *                    signal dispositions are set up)
 * then waits until every local rank of its node has written its pid file (so
 * that a failing rank fails while the others are surely running) and then
 * does the first matching RULE, "R=ACTION" or "*=ACTION" (default exit:0).
 * ACTION is STEP[,STEP...]; the last step is one of
 *   exit:N          exit with status N
 *   kill:S          send itself signal S
 *   sleep           sleep "forever"
 *   sleep-noterm    ignore SIGTERM, then sleep
 *   sleep-nostop    ignore SIGTERM and SIGINT, then sleep
 *   read            read stdin to its end, then exit 0
 * and the steps before it any of
 *   spawn           (before the files are written) start a child that starts
 *                   a grandchild, like a wrapper script running a program that
 *                   runs another; the child waits for the grandchild, which
 *                   sleeps. Writes DIR/<RANK>.child and DIR/<RANK>.grandchild
 *                   (their pids) before DIR/<RANK>.pid.
 *   spawn-noterm    the same, with a grandchild that ignores SIGTERM
 *   say:TEXT        (after the barrier) write TEXT and a newline to stdout
 * "Forever" is 60 s (alarm), so that a broken launcher cannot leave
 * processes behind for long. SIGQUIT makes every one of these processes exit
 * with status 131, without a core dump.
 */
#define _POSIX_C_SOURCE 200809L

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

extern char **environ;

static const unsigned kSafetySeconds = 60;

static void die(const char *what) {
  fprintf(stderr, "rank_helper: %s: %s\n", what, strerror(errno));
  exit(99);
}

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) {
    fprintf(stderr, "rank_helper: %s is not set\n", name);
    exit(99);
  }
  return atoi(v);
}

static void write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die("write");
    p += w;
    n -= (size_t)w;
  }
}

/* Writes the NUL-separated strings to DIR/NAME atomically. */
static void write_file(const char *dir, const char *name, char *const *strs, int count, int nul) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) die(tmp);
  for (int i = 0; i < count; ++i) write_all(fd, strs[i], strlen(strs[i]) + (nul ? 1 : 0));
  if (close(fd) != 0) die("close");
  if (rename(tmp, path) != 0) die("rename");
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void sleep_forever(void) {
  alarm(kSafetySeconds);
  for (;;) pause();
}

static void on_quit(int sig) {
  _exit(128 + sig);
}

/* The "spawn" step: child and grandchild; returns once the grandchild has set
 * up its signal dispositions, after writing both pid files. */
static void spawn(const char *dir, int rank, int noterm) {
  int p[2];
  if (pipe(p) != 0) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    pid_t grandchild = fork();
    if (grandchild < 0) die("fork");
    if (grandchild == 0) {
      char buf[32];
      if (noterm) signal(SIGTERM, SIG_IGN);
      close(p[0]);
      write_all(p[1], buf, (size_t)snprintf(buf, sizeof buf, "%d", (int)getpid()));
      close(p[1]);
      sleep_forever();
    }
    close(p[0]);
    close(p[1]);
    /* Like a shell's `wait`: a SIGTERM ends the child, not the grandchild. */
    while (waitpid(grandchild, NULL, 0) < 0 && errno == EINTR) {
    }
    _exit(0);
  }
  close(p[1]);
  char buf[32];
  size_t len = 0;
  while (len < sizeof buf - 1) {
    ssize_t n = read(p[0], buf + len, sizeof buf - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("read");
    if (n == 0) break;
    len += (size_t)n;
  }
  close(p[0]);
  buf[len] = '\0';
  if (atoi(buf) <= 0) {
    fprintf(stderr, "rank_helper: no grandchild pid\n");
    exit(99);
  }
  char name[64], pid[sizeof buf + 1];
  char *pid_str[] = {pid};
  snprintf(pid, sizeof pid, "%d\n", (int)child);
  snprintf(name, sizeof name, "%d.child", rank);
  write_file(dir, name, pid_str, 1, 0);
  snprintf(pid, sizeof pid, "%s\n", buf);
  snprintf(name, sizeof name, "%d.grandchild", rank);
  write_file(dir, name, pid_str, 1, 0);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: rank_helper DIR [RULE...] [-- ARG...]\n");
    return 99;
  }
  const char *dir = argv[1];
  const int rank = env_int("RANK");
  const int local_world = env_int("LOCAL_WORLD_SIZE");
  const int first_rank = rank - env_int("LOCAL_RANK");

  const char *action = "exit:0";
  for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; ++i) {
    char *eq = strchr(argv[i], '=');
    if (!eq) continue;
    if ((eq - argv[i] == 1 && argv[i][0] == '*') ||
        (atoi(argv[i]) == rank && argv[i][0] >= '0' && argv[i][0] <= '9')) {
      action = eq + 1;
      break;
    }
  }
  /* Split ACTION into its steps; action becomes the last one. */
  char steps_buf[1024];
  char *steps[16];
  int nsteps = 0;
  snprintf(steps_buf, sizeof steps_buf, "%s", action);
  for (char *s = steps_buf; nsteps < 16;) {
    steps[nsteps++] = s;
    char *comma = strchr(s, ',');
    if (!comma) break;
    *comma = '\0';
    s = comma + 1;
  }
  action = steps[nsteps - 1];

  signal(SIGQUIT, on_quit);
  for (int i = 0; i < nsteps - 1; ++i) {
    if (strcmp(steps[i], "spawn") == 0 || strcmp(steps[i], "spawn-noterm") == 0) {
      spawn(dir, rank, strcmp(steps[i], "spawn-noterm") == 0);
    } else if (strncmp(steps[i], "say:", 4) != 0) {
      fprintf(stderr, "rank_helper: unknown step '%s'\n", steps[i]);
      return 99;
    }
  }
  if (strcmp(action, "sleep-noterm") == 0 || strcmp(action, "sleep-nostop") == 0)
    signal(SIGTERM, SIG_IGN);
  if (strcmp(action, "sleep-nostop") == 0) signal(SIGINT, SIG_IGN);

  char name[64], pid[32];
  int env_count = 0;
  while (environ[env_count]) ++env_count;
  snprintf(name, sizeof name, "%d.env", rank);
  write_file(dir, name, environ, env_count, 1);
  snprintf(name, sizeof name, "%d.args", rank);
  write_file(dir, name, argv + 1, argc - 1, 1);
  snprintf(pid, sizeof pid, "%d\n", (int)getpid());
  char *pid_str[] = {pid};
  snprintf(name, sizeof name, "%d.pid", rank);
  write_file(dir, name, pid_str, 1, 0);

  /* Barrier: all local ranks are running. */
  for (int waited_ms = 0; waited_ms < 30000; waited_ms += 10) {
    int missing = 0;
    for (int r = first_rank; r < first_rank + local_world && !missing; ++r) {
      char path[4096];
      struct stat st;
      snprintf(path, sizeof path, "%s/%d.pid", dir, r);
      missing = stat(path, &st) != 0;
    }
    if (!missing) break;
    sleep_ms(10);
  }

  for (int i = 0; i < nsteps - 1; ++i) {
    if (strncmp(steps[i], "say:", 4) != 0) continue;
    write_all(1, steps[i] + 4, strlen(steps[i] + 4));
    write_all(1, "\n", 1);
  }

  if (strncmp(action, "exit:", 5) == 0) return atoi(action + 5);
  if (strcmp(action, "read") == 0) {
    char buf[256];
    ssize_t n;
    while ((n = read(0, buf, sizeof buf)) != 0) {
      if (n < 0 && errno != EINTR) die("read stdin");
    }
    return 0;
  }
  if (strncmp(action, "kill:", 5) == 0) {
    kill(getpid(), atoi(action + 5));
    sleep_forever();
  }
  if (strncmp(action, "sleep", 5) == 0) sleep_forever();
  fprintf(stderr, "rank_helper: unknown action '%s'\n", action);
  return 99;
}
