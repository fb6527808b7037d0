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
 * does the first matching RULE, "R=ACTION" or "*=ACTION" (default exit:0):
 *   exit:N          exit with status N
 *   kill:S          send itself signal S
 *   sleep           sleep "forever"
 *   sleep-noterm    ignore SIGTERM, then sleep
 *   sleep-nostop    ignore SIGTERM and SIGINT, then sleep
 * "Forever" is 60 s (alarm), so that a broken launcher cannot leave
 * processes behind for long.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

  if (strncmp(action, "exit:", 5) == 0) return atoi(action + 5);
  if (strncmp(action, "kill:", 5) == 0) {
    kill(getpid(), atoi(action + 5));
    sleep_forever();
  }
  if (strncmp(action, "sleep", 5) == 0) sleep_forever();
  fprintf(stderr, "rank_helper: unknown action '%s'\n", action);
  return 99;
}
