/*
 * sv_stall.c
 *		LD_PRELOAD shim for 118_client_supervisor_races.pl: makes pg_leader's
 *		supervisor stall at the two instants a signal or the scheduler can
 *		hit it, so that the test does not depend on luck.
 *
 * The supervisor is the only process whose own name and whose parent's
 * name are both "pg_leader" (it is forked, not exec'd; the command and
 * pg_leader itself have other names or parents).  LE_SV_STALL chooses:
 *   fork: the supervisor stops itself (SIGSTOP) before it forks the
 *         command, as a group stop arriving that early would;
 *   forked: it stops itself right after the fork, before it can report
 *         the command's pid;
 *   reap: once the supervisor learns that the command exited (waitpid or
 *         waitid), it sleeps 600 ms before going on, as a supervisor
 *         preempted (or stopped) right there would.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Is /proc/PID/comm "pg_leader"? */
static bool
is_pg_leader(pid_t pid)
{
	char		path[64];
	char		buf[64] = "";
	FILE	   *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int) pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	if (fgets(buf, sizeof(buf), f) == NULL)
		buf[0] = '\0';
	fclose(f);
	return strcmp(buf, "pg_leader\n") == 0;
}

/* Are we the supervisor, and is this stall asked for? */
static bool
stall(const char *what)
{
	const char *v = getenv("LE_SV_STALL");

	return v && strcmp(v, what) == 0 && is_pg_leader(getpid()) && is_pg_leader(getppid());
}

pid_t
fork(void)
{
	pid_t		(*real) (void) = (pid_t (*) (void)) dlsym(RTLD_NEXT, "fork");

	pid_t		pid;

	if (stall("fork"))
		raise(SIGSTOP);
	pid = real();
	if (pid > 0 && stall("forked"))
		raise(SIGSTOP);
	return pid;
}

pid_t
waitpid(pid_t pid, int *status, int options)
{
	pid_t		(*real) (pid_t, int *, int) = (pid_t (*) (pid_t, int *, int)) dlsym(RTLD_NEXT, "waitpid");
	int			st = 0;
	pid_t		w = real(pid, &st, options);

	if (status)
		*status = st;
	if (w > 0 && !WIFSTOPPED(st) && !WIFCONTINUED(st) && stall("reap"))
		usleep(600 * 1000);
	return w;
}

int
waitid(idtype_t idtype, id_t id, siginfo_t *info, int options)
{
	int			(*real) (idtype_t, id_t, siginfo_t *, int) =
		(int (*) (idtype_t, id_t, siginfo_t *, int)) dlsym(RTLD_NEXT, "waitid");
	int			rc = real(idtype, id, info, options);

	if (rc == 0 && info && info->si_pid > 0 &&
		(info->si_code == CLD_EXITED || info->si_code == CLD_KILLED || info->si_code == CLD_DUMPED) &&
		stall("reap"))
		usleep(600 * 1000);
	return rc;
}
