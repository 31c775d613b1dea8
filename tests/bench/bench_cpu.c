/* uiwarp-bench-cpu: runs one command and reports the CPU time it used and
 * the most threads it had, for scripts/bench.sh (CPU seconds per GiB moved
 * on each side of a transfer, thread count of a many-QP run).
 *
 *   uiwarp-bench-cpu [-o FILE] [-i MS] [--] CMD [ARGS...]
 *
 * Forks CMD (exec'd directly, so `uiwarp-bench-cpu -- uiwarp-run PROG` counts
 * PROG: uiwarp-run execs it), samples /proc/PID/status "Threads:" every MS
 * milliseconds (default 50) while it runs, and when it ends writes one line
 *
 *   cpu_user=SECONDS cpu_sys=SECONDS threads_max=N wall=SECONDS status=RC
 *
 * to FILE (default stderr). user and sys come from wait4(2): every thread of
 * CMD and every child it waited for. SIGINT, SIGTERM and SIGHUP are passed
 * on to CMD. Exits with CMD's exit status, or 128 + the signal that ended it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid;

static void forward(int sig)
{
	if (child_pid > 0)
		kill((pid_t)child_pid, sig);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Threads of pid from /proc/pid/status, or 0. */
static int threads_of(pid_t pid)
{
	char path[64], line[256];
	int n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "Threads:", 8) == 0) {
			n = atoi(line + 8);
			break;
		}
	}
	fclose(f);
	return n;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: uiwarp-bench-cpu [-o FILE] [-i MS] [--] CMD [ARGS...]\n");
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	long interval_ms = 50;
	int i = 1;

	while (i < argc && argv[i][0] == '-') {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		} else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
			out = argv[i + 1];
			i += 2;
		} else if (strcmp(argv[i], "-i") == 0 && i + 1 < argc) {
			interval_ms = atol(argv[i + 1]);
			i += 2;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc || interval_ms < 1 || interval_ms > 10000) {
		usage(stderr);
		return 2;
	}

	struct sigaction sa = {.sa_handler = forward};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	double t0 = now_s();
	pid_t pid = fork();
	if (pid < 0) {
		perror("uiwarp-bench-cpu: fork");
		return 127;
	}
	if (pid == 0) {
		execvp(argv[i], &argv[i]);
		fprintf(stderr, "uiwarp-bench-cpu: cannot run %s: %s\n", argv[i], strerror(errno));
		_exit(127);
	}
	child_pid = pid;

	int status = 0, threads_max = 0;
	struct rusage ru = {0};
	struct timespec nap = {.tv_sec = interval_ms / 1000,
			       .tv_nsec = (interval_ms % 1000) * 1000000L};
	for (;;) {
		pid_t r = wait4(pid, &status, WNOHANG, &ru);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			perror("uiwarp-bench-cpu: wait4");
			return 127;
		}
		int t = threads_of(pid);
		if (t > threads_max)
			threads_max = t;
		nanosleep(&nap, NULL);
	}
	double wall = now_s() - t0;
	int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

	FILE *f = out ? fopen(out, "w") : stderr;
	if (!f) {
		fprintf(stderr, "uiwarp-bench-cpu: cannot write %s: %s\n", out, strerror(errno));
		f = stderr;
	}
	fprintf(f, "cpu_user=%.3f cpu_sys=%.3f threads_max=%d wall=%.3f status=%d\n",
		(double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
		(double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6, threads_max, wall,
		rc);
	if (f != stderr)
		fclose(f);
	return rc;
}
