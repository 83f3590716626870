/*-------------------------------------------------------------------------
 *
 * supervise.c
 *		The supervisor of pg_leader's command: the command's parent and the
 *		leader of its process group, which stops the group at the deadline
 *		even while the wrapper is frozen.
 *
 * The invariant: the command never runs without its supervisor S, and
 * nothing of it survives S: S SIGTERMs its group G at kill_deadline -
 * grace, SIGKILLs it at kill_deadline, when the command exits, and when
 * its input from the wrapper reaches EOF.  S and the command are forked
 * from a threaded process: they call only async-signal-safe functions.
 * The processes, the messages between wrapper and S, a frozen supervisor
 * and who may signal G: see "src/client" in src/README.md.
 *
 *-------------------------------------------------------------------------
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "le_client.h"
#include "supervise.h"

/* Reports of the supervisor (and of the command on exec failure). */
enum
{
	SV_STARTED = 1,				/* value: the command's pid */
	SV_EXEC_FAILED,				/* value: errno of execve */
	SV_FORK_FAILED,				/* value: errno of fork */
	SV_STOPPED,					/* value: the signal that stopped the command */
	SV_DEADLINE_TERM,			/* SIGTERM sent at kill deadline - grace */
	SV_DEADLINE_KILL,			/* SIGKILL sent at the kill deadline */
	SV_EXITED,					/* value: the command's wait status */
	SV_PONG						/* value: the number of the ping answered */
};

typedef struct sv_msg
{
	int32_t		kind;
	int32_t		value;
} sv_msg;

/* Signals the supervisor ignores: only SIGKILL (and SIGSTOP) end or stop it. */
static const int sv_ignored[] = {
	SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE,
	SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGWINCH
};

/*
 * argv for /bin/sh running the command's file, when execve says it is no
 * executable format (ENOEXEC): prepared before fork.
 */
static char **sv_sh_argv = NULL;
/* Signals the command starts with ignored (sv_keep_ignored); others are default. */
static sigset_t sv_keep_ign;
static bool sv_keep_ign_init = false;

/* Self-pipe of the supervisor's SIGCHLD handler. */
static int sv_chld_pipe[2] = {-1, -1};

/* Send one report (async-signal-safe; a lost report only costs detail). */
static void
sv_report(int fd, int32_t kind, int32_t value)
{
	sv_msg		m = {kind, value};
	ssize_t		rc = write(fd, &m, sizeof(m));

	(void) rc;
}

/* SIGCHLD in the supervisor: wake its poll. */
static void
sv_on_chld(int sig)
{
	int			save = errno;
	char		c = 0;
	ssize_t		rc = write(sv_chld_pipe[1], &c, 1);

	(void) sig;
	(void) rc;
	errno = save;
}

/* Descriptors the caller passed that the command keeps (sv_keep_fds). */
static int	sv_keep[SV_MAX_KEEP];
static int	sv_nkeep = 0;

/* Set LISTEN_PID to the command's pid: the entry, filled in after fork. */
static bool sv_listen_pid = false;
static char sv_listen_entry[48];

/* Keep these descriptors open for the command; see supervise.h. */
void
sv_keep_fds(const int *fds, int n, bool set_listen_pid)
{
	sv_nkeep = 0;
	for (int i = 0; i < n && sv_nkeep < SV_MAX_KEEP; i++)
		sv_keep[sv_nkeep++] = fds[i];
	sv_listen_pid = set_listen_pid;
}

/*
 * Close descriptors lo .. hi (async-signal-safe): close_range where the
 * kernel has it, else one by one up to the descriptor limit.
 */
static void
close_span(unsigned int lo, unsigned int hi)
{
	struct rlimit rl;

	if (lo > hi)
		return;
#ifdef SYS_close_range
	if (syscall(SYS_close_range, lo, hi, 0) == 0)
		return;
#endif
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 1048576)
		rl.rlim_cur = 1048576;
	for (unsigned int i = lo; i <= hi && i < rl.rlim_cur; i++)
		close((int) i);
}

/*
 * Close every descriptor from 3 up, however high, except the ones listed
 * (-1 entries ignored) and the ones the command keeps.
 */
static void
close_all_but(int a, int b, int c)
{
	int			keep[SV_MAX_KEEP + 3];
	int			n = 0;
	unsigned int lo = 3;

	keep[n++] = a;
	keep[n++] = b;
	keep[n++] = c;
	for (int j = 0; j < sv_nkeep; j++)
		keep[n++] = sv_keep[j];
	/* ascending, so that the gaps between them are closed in spans */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--)
		{
			int			t = keep[j];

			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	for (int i = 0; i < n; i++)
	{
		if (keep[i] < 0 || (unsigned int) keep[i] < lo)
			continue;
		close_span(lo, (unsigned int) keep[i] - 1);
		lo = (unsigned int) keep[i] + 1;
	}
	close_span(lo, ~0U);
}

/* The command, in the freshly forked child of the supervisor: exec or report. */
static void
command_main(pid_t sup, int out_fd, const char *path, char *const argv[], char *const envp[])
{
	struct sigaction sa;
	sigset_t	none;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
		{
			/* what nohup or a shell ignored for pg_leader stays ignored for its command */
			sa.sa_handler = sv_keep_ign_init && sigismember(&sv_keep_ign, s) == 1 ? SIG_IGN : SIG_DFL;
			sigaction(s, &sa, NULL);
		}
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != sup)
		_exit(137);				/* the supervisor died before the death signal was armed */
	if (sv_listen_pid)
	{
		/* "LISTEN_PID=" and our pid, without stdio (async-signal-safe) */
		char		digits[16];
		int			nd = 0;
		size_t		at = strlen("LISTEN_PID=");

		for (pid_t v = getpid(); v > 0 && nd < 15; v /= 10)
			digits[nd++] = (char) ('0' + v % 10);
		while (nd > 0)
			sv_listen_entry[at++] = digits[--nd];
		sv_listen_entry[at] = '\0';
	}
	execve(path, argv, envp);
	/* a script without "#!": run it with /bin/sh, as execvp does */
	if (errno == ENOEXEC && sv_sh_argv != NULL)
	{
		execve("/bin/sh", sv_sh_argv, envp);
		errno = ENOEXEC;
	}
	sv_report(out_fd, SV_EXEC_FAILED, errno);
	_exit(errno == ENOENT ? 127 : 126);
}

/*
 * Body of the supervisor: start the command, pass on news, enforce the
 * deadline.  Never returns.
 */
static void
supervisor_main(int in_fd, int out_fd, const char *path, char *const argv[], char *const envp[],
				int64_t deadline, int64_t grace_ms, int tty_fd)
{
	struct sigaction sa;
	sigset_t	none;
	pid_t		self = getpid();
	pid_t		cmd;
	bool		term_sent = false;
	int64_t		pong = 0;

	setpgid(0, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sv_ignored) / sizeof(sv_ignored[0]); i++)
		sigaction(sv_ignored[i], &sa, NULL);
	close_all_but(in_fd, out_fd, tty_fd);
	if (pipe2(sv_chld_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		sv_report(out_fd, SV_FORK_FAILED, errno);
		_exit(70);
	}
	sa.sa_handler = sv_on_chld;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGCHLD, &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	fcntl(in_fd, F_SETFL, O_NONBLOCK);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	/* the wrapper's death kills us: its end of in_fd closes */
	if (tty_fd >= 0)
		tcsetpgrp(tty_fd, self);

	cmd = fork();
	if (cmd < 0)
	{
		sv_report(out_fd, SV_FORK_FAILED, errno);
		_exit(70);
	}
	if (cmd == 0)
		command_main(self, out_fd, path, argv, envp);
	sv_report(out_fd, SV_STARTED, (int32_t) cmd);

	for (;;)
	{
		int64_t		msg[16];
		ssize_t		n;
		int			st;
		pid_t		w;
		int64_t		now,
					next;
		struct pollfd p[2];
		char		buf[64];

		/* 1. News from the wrapper first: never act on a deadline not yet read. */
		while ((n = read(in_fd, msg, sizeof(msg))) != 0)
		{
			if (n < 0)
			{
				if (errno == EINTR)
					continue;
				break;			/* EAGAIN: nothing more */
			}
			for (ssize_t i = 0; i < n / (ssize_t) sizeof(int64_t); i++)
			{
				if (msg[i] < 0)
					pong = -msg[i];	/* a ping: answered below */
				else if (!term_sent)
					deadline = msg[i];
			}
		}
		if (pong > 0)
		{
			sv_report(out_fd, SV_PONG, (int32_t) pong);
			pong = 0;
		}
		if (n == 0)
		{
			/* the wrapper is gone: nothing may keep running on its lease */
			kill(0, SIGKILL);
			_exit(137);
		}

		/*
		 * 2. The command (and orphans, which are ours as subreaper).  The
		 * command's exit is only peeked at (WNOWAIT), reported, and left a
		 * zombie: should we be killed between learning its status and
		 * reporting it, the zombie passes to the wrapper (a subreaper),
		 * which reaps it with that status itself.
		 */
		for (;;)
		{
			siginfo_t	si;

			memset(&si, 0, sizeof(si));
			if (waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | WNOHANG | WNOWAIT) != 0 ||
				si.si_pid <= 0)
				break;
			w = si.si_pid;
			if (w != cmd)
			{
				(void) waitpid(w, &st, WNOHANG | WUNTRACED);
				continue;
			}
			if (si.si_code == CLD_STOPPED || si.si_code == CLD_TRAPPED)
			{
				/* consume this stop only, never the exit that may follow */
				memset(&si, 0, sizeof(si));
				if (waitid(P_PID, (id_t) cmd, &si, WSTOPPED | WNOHANG) == 0 && si.si_pid == cmd)
					sv_report(out_fd, SV_STOPPED, si.si_status);
				continue;
			}
			if (si.si_code == CLD_EXITED)
				st = (si.si_status & 0xff) << 8;
			else
				st = (si.si_status & 0x7f) | (si.si_code == CLD_DUMPED ? 0x80 : 0);
			sv_report(out_fd, SV_EXITED, st);
			kill(0, SIGKILL);	/* what is left of the group, and us */
			_exit(0);
		}

		/* 3. The deadline. */
		now = le_monotonic_ms();
		if (now >= deadline)
		{
			sv_report(out_fd, SV_DEADLINE_KILL, 0);
			kill(0, SIGKILL);
			_exit(137);
		}
		if (!term_sent && now >= deadline - grace_ms)
		{
			term_sent = true;
			sv_report(out_fd, SV_DEADLINE_TERM, 0);
			kill(0, SIGTERM);
			kill(0, SIGCONT);
		}

		/* 4. Sleep until news, a child's change or the next deadline step. */
		next = term_sent ? deadline : deadline - grace_ms;
		p[0].fd = in_fd;
		p[0].events = POLLIN;
		p[1].fd = sv_chld_pipe[0];
		p[1].events = POLLIN;
		poll(p, 2, next - now > 1000 ? 1000 : (int) (next - now) + 1);
		while (read(sv_chld_pipe[0], buf, sizeof(buf)) > 0)
			;
	}
}

static void read_reports(sv_run *r);

/* How long sv_start waits for the supervisor's report of the command's pid. */
#define SV_START_WAIT_MS 200

/* Start the supervisor and, under it, the command; see supervise.h. */
bool
sv_start(sv_run *r, const char *path, char *const argv[], char *const envp[],
		 int64_t kill_deadline, int64_t grace_ms, int tty_fd)
{
	int			to[2],
				from[2];
	pid_t		pid;
	int			save;
	char	  **listen_env = NULL;

	memset(r, 0, sizeof(*r));
	r->to_sup = r->from_sup = -1;
	r->cmd_pidfd = -1;
	if (pipe2(to, O_CLOEXEC) != 0)
		return false;
	if (pipe2(from, O_CLOEXEC) != 0)
	{
		save = errno;
		close(to[0]);
		close(to[1]);
		errno = save;
		return false;
	}
	{
		size_t		n = 0;

		while (argv[n] != NULL)
			n++;
		free(sv_sh_argv);
		sv_sh_argv = malloc((n + 2) * sizeof(char *));
		if (sv_sh_argv != NULL)
		{
			sv_sh_argv[0] = (char *) "/bin/sh";
			sv_sh_argv[1] = (char *) path;
			for (size_t i = 1; i <= n; i++)
				sv_sh_argv[i + 1] = argv[i];
		}
	}
	if (sv_listen_pid)
	{
		/* envp with LISTEN_PID pointing at sv_listen_entry (set after fork) */
		size_t		n = 0,
					k = 0;

		while (envp[n] != NULL)
			n++;
		listen_env = malloc((n + 2) * sizeof(char *));
		if (listen_env == NULL)
		{
			close(to[0]);
			close(to[1]);
			close(from[0]);
			close(from[1]);
			errno = ENOMEM;
			return false;
		}
		for (size_t i = 0; i < n; i++)
			if (strncmp(envp[i], "LISTEN_PID=", 11) != 0)
				listen_env[k++] = envp[i];
		snprintf(sv_listen_entry, sizeof(sv_listen_entry), "LISTEN_PID=");
		listen_env[k++] = sv_listen_entry;
		listen_env[k] = NULL;
		envp = listen_env;
	}
	pid = fork();
	if (pid == 0)
		supervisor_main(to[0], from[1], path, argv, envp, kill_deadline, grace_ms, tty_fd);
	save = errno;
	free(listen_env);
	free(sv_sh_argv);
	sv_sh_argv = NULL;
	close(to[0]);
	close(from[1]);
	if (pid < 0)
	{
		close(to[1]);
		close(from[0]);
		errno = save;
		return false;
	}
	/* also here, so that the group exists before we may signal it */
	setpgid(pid, pid);
	fcntl(to[1], F_SETFL, O_NONBLOCK);	/* never block the wrapper on it */
	fcntl(from[0], F_SETFL, O_NONBLOCK);
	r->group = pid;
	r->to_sup = to[1];
	r->from_sup = from[0];
	r->sent_deadline = kill_deadline;
	r->pong_at = le_monotonic_ms();
	/* the command's pid, for the caller's log: its first report comes at once */
	{
		struct pollfd p = {r->from_sup, POLLIN, 0};

		if (poll(&p, 1, SV_START_WAIT_MS) > 0)
			read_reports(r);
	}
	return true;
}

/* Pass a later kill deadline to the supervisor; atomic 8-byte write. */
void
sv_set_deadline(sv_run *r, int64_t kill_deadline)
{
	ssize_t		rc;

	if (r->to_sup < 0 || kill_deadline == r->sent_deadline)
		return;
	/* a full pipe means it is frozen: it keeps the older, earlier deadline */
	rc = write(r->to_sup, &kill_deadline, sizeof(kill_deadline));
	if (rc == (ssize_t) sizeof(kill_deadline))
		r->sent_deadline = kill_deadline;
}

/* Signal the group while some member is left (see the header comment). */
bool
sv_signal(sv_run *r, int sig)
{
	if (r->group <= 0 || r->group_gone)
		return false;
	return kill(-r->group, sig) == 0;
}

/* Read every pending report. */
static void
read_reports(sv_run *r)
{
	sv_msg		m[32];
	ssize_t		n;

	if (r->from_sup < 0)
		return;
	while ((n = read(r->from_sup, m, sizeof(m))) > 0)
	{
		for (ssize_t i = 0; i < n / (ssize_t) sizeof(sv_msg); i++)
		{
			switch (m[i].kind)
			{
				case SV_STARTED:
					if (r->command == m[i].value && r->cmd_pidfd >= 0)
						break;	/* found already, while S was stopped */
					r->command = m[i].value;
					/*
					 * A quick command may be reaped (and its pid reused) by
					 * now: the pidfd is acted on only while S has not
					 * reported the command's end (see cmd_run).
					 */
					r->cmd_pidfd = (int) syscall(SYS_pidfd_open, r->command, 0);
					break;
				case SV_EXEC_FAILED:
				case SV_FORK_FAILED:
					r->exec_failed = true;
					r->exec_errno = m[i].value;
					r->sup_reported_end = m[i].kind == SV_FORK_FAILED;
					break;
				case SV_STOPPED:
					r->stopped_sig = m[i].value;
					break;
				case SV_DEADLINE_TERM:
					r->deadline_term = true;
					break;
				case SV_DEADLINE_KILL:
					r->deadline_kill = true;
					r->sup_reported_end = true;
					break;
				case SV_EXITED:
					r->command_exited = true;
					r->command_wstatus = m[i].value;
					r->sup_reported_end = true;
					break;
				case SV_PONG:
					if (m[i].value == r->ping_out)
					{
						r->ping_out = 0;
						r->pong_at = le_monotonic_ms();
					}
					break;
			}
		}
	}
}

/*
 * State, parent and process group of pid from /proc/PID/stat; false when
 * it cannot be read (gone).
 */
static bool
proc_stat(pid_t pid, char *state, long *ppid, long *pgrp)
{
	char		path[64];
	char		buf[512];
	char	   *p;
	int			fd;
	ssize_t		n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && sscanf(p + 1, " %c %ld %ld", state, ppid, pgrp) == 3;
}

/*
 * A child of pid (the first found in /proc), or 0.  Only for a supervisor
 * that is stopped, so its children cannot change under us.
 */
static pid_t
child_of(pid_t pid)
{
	DIR		   *d = opendir("/proc");
	struct dirent *de;
	pid_t		found = 0;

	if (d == NULL)
		return 0;
	while (found == 0 && (de = readdir(d)) != NULL)
	{
		char		state;
		long		ppid,
					pgrp;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		if (proc_stat((pid_t) atol(de->d_name), &state, &ppid, &pgrp) && ppid == (long) pid)
			found = (pid_t) atol(de->d_name);
	}
	closedir(d);
	return found;
}

/* Read reports, reap members of the group, ping; see supervise.h. */
void
sv_poll(sv_run *r)
{
	int64_t		now;

	read_reports(r);
	while (r->group > 0 && !r->group_gone)
	{
		int			st;
		pid_t		w = waitpid(-r->group, &st, WNOHANG | WUNTRACED | WCONTINUED);

		if (w > 0)
		{
			if (WIFSTOPPED(st) || WIFCONTINUED(st))
			{
				if (w == r->group)
					r->sup_stopped = WIFSTOPPED(st);
				continue;
			}
			if (w == r->group)
			{
				r->sup_exited = true;
				r->sup_stopped = false;
			}
			else if (w == r->command && !r->command_exited)
			{
				/* orphaned by S's death before S could reap it: ours */
				r->command_exited = true;
				r->command_wstatus = st;
			}
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == ECHILD)
		{
			r->group_gone = true;
			r->sup_exited = true;
		}
		break;
	}
	/* the supervisor reports before it dies: once it is reaped, all is readable */
	if (r->sup_exited)
		read_reports(r);
	/* stopped before it told us the command's pid: find it ourselves */
	r->no_command = false;
	if (r->sup_stopped && !r->sup_exited && r->command <= 0 && !r->exec_failed)
	{
		pid_t		c = child_of(r->group);

		if (c > 0)
		{
			r->command = c;
			r->cmd_pidfd = (int) syscall(SYS_pidfd_open, c, 0);
		}
		else
			r->no_command = true;
	}

	now = le_monotonic_ms();
	/* the command's end, seen without its parent's help */
	if (r->cmd_pidfd >= 0 && !r->cmd_dead)
	{
		struct pollfd p = {r->cmd_pidfd, POLLIN, 0};

		if (poll(&p, 1, 0) > 0)
		{
			r->cmd_dead = true;
			r->cmd_dead_at = now;
		}
	}
	/* a liveness ping, one at a time */
	if (r->to_sup >= 0 && !r->sup_exited && r->ping_out == 0 && now - r->pong_at >= SV_PING_MS)
	{
		int64_t		v;

		r->ping_seq = r->ping_seq >= INT32_MAX - 1 ? 1 : r->ping_seq + 1;
		v = -(int64_t) r->ping_seq;
		if (write(r->to_sup, &v, sizeof(v)) == (ssize_t) sizeof(v))
		{
			r->ping_out = r->ping_seq;
			r->ping_sent_at = now;
		}
	}
}

/* Stopped, or silent for SV_UNRESPONSIVE_MS; see supervise.h. */
bool
sv_sup_frozen(const sv_run *r, int64_t now)
{
	if (r->group <= 0 || r->sup_exited)
		return false;
	return r->sup_stopped || (r->ping_out != 0 && now - r->ping_sent_at >= SV_UNRESPONSIVE_MS);
}

/*
 * State of the command in /proc/PID/stat ("T" stopped, "t" tracing stop),
 * trusted only while the pid is still in the group (not reused).
 */
bool
sv_command_stopped(const sv_run *r)
{
	char		state;
	long		ppid,
				pgrp;

	if (r->command <= 0)
		return r->no_command;	/* stopped before its fork: nothing can ever run */
	if (r->command_exited || !proc_stat(r->command, &state, &ppid, &pgrp))
		return false;
	return (state == 'T' || state == 't') && pgrp == (long) r->group;
}

/* Close the pipes of a run whose group is gone. */
void
sv_finish(sv_run *r)
{
	if (r->to_sup >= 0)
		close(r->to_sup);
	if (r->from_sup >= 0)
		close(r->from_sup);
	if (r->cmd_pidfd >= 0)
		close(r->cmd_pidfd);
	r->to_sup = r->from_sup = r->cmd_pidfd = -1;
}

/* Reap strays: zombie children of ours outside every live group (see supervise.h). */
void
sv_reap_strays(const pid_t *live, int n_live)
{
	DIR		   *d;
	struct dirent *de;
	pid_t		self = getpid();

	if (n_live < 0)
		return;
	if (n_live == 0)
	{
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		return;
	}
	if ((d = opendir("/proc")) == NULL)
		return;
	while ((de = readdir(d)) != NULL)
	{
		char		state;
		long		ppid,
					pgrp;
		pid_t		pid;
		bool		in_live = false;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		pid = (pid_t) atol(de->d_name);
		if (!proc_stat(pid, &state, &ppid, &pgrp) || ppid != (long) self || state != 'Z')
			continue;
		for (int i = 0; i < n_live && !in_live; i++)
			in_live = pgrp == (long) live[i];
		/* a member of a live group is reaped by that group's sv_poll */
		if (!in_live)
			(void) waitpid(pid, NULL, WNOHANG);
	}
	closedir(d);
}

/* Start the command with sig ignored, as it was when pg_leader started. */
void
sv_keep_ignored(int sig)
{
	if (!sv_keep_ign_init)
	{
		sigemptyset(&sv_keep_ign);
		sv_keep_ign_init = true;
	}
	sigaddset(&sv_keep_ign, sig);
}

/* Orphans of the command become our children, so we can reap them. */
void
sv_become_subreaper(void)
{
	prctl(PR_SET_CHILD_SUBREAPER, 1);
}
