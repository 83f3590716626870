/*-------------------------------------------------------------------------
 *
 * supervise.h
 *		Supervision of the command that pg_leader runs while it leads: a
 *		supervisor process that is the command's parent and the leader of
 *		the command's process group, and stops that group at the deadline.
 *
 * See supervise.c for the processes, the messages between them and the
 * rules about who may signal the group when.
 *
 *-------------------------------------------------------------------------
 */
#ifndef SUPERVISE_H
#define SUPERVISE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* One supervised command, as the wrapper (the supervisor's parent) sees it. */
typedef struct sv_run
{
	pid_t		group;			/* supervisor pid = process group id; 0: none */
	bool		group_gone;		/* no process of the group is left */
	bool		sup_exited;		/* the supervisor was reaped */
	bool		sup_reported_end;	/* it reported the command's end first */
	int			to_sup;			/* write end: kill deadlines for the supervisor */
	int			from_sup;		/* read end: reports of the supervisor and command */
	pid_t		command;		/* the command's pid, once reported (0 before) */
	bool		command_exited;
	int			command_wstatus;	/* wait status when command_exited */
	bool		exec_failed;
	int			exec_errno;
	int			stopped_sig;	/* the command was stopped by this signal (0: no news) */
	bool		deadline_term;	/* the supervisor sent SIGTERM at deadline - grace */
	bool		deadline_kill;	/* the supervisor sent SIGKILL at the deadline */
	int64_t		sent_deadline;	/* last kill deadline written to the supervisor */
	bool		sup_stopped;	/* the supervisor is stopped (WUNTRACED) */
	bool		no_command;		/* ... before it forked the command */
	int			cmd_pidfd;		/* pidfd of the command, -1: none */
	bool		cmd_dead;		/* the pidfd says the command has ended */
	int64_t		cmd_dead_at;	/* when that was seen (le_monotonic_ms) */
	int32_t		ping_seq;		/* last liveness ping sent to the supervisor */
	int32_t		ping_out;		/* that ping, while unanswered (0: none) */
	int64_t		ping_sent_at;	/* when it was sent */
	int64_t		pong_at;		/* when the supervisor last answered */
} sv_run;

/* A liveness ping goes to the supervisor this often ... */
#define SV_PING_MS			200
/* ... and one unanswered for this long makes it unresponsive. */
#define SV_UNRESPONSIVE_MS	1000

/*
 * Fork the supervisor, which forks and execs the command (path, argv, envp
 * all prepared by the caller: nothing is allocated after fork).  kill_deadline
 * is on the le_monotonic_ms() clock: the supervisor SIGTERMs the group at
 * kill_deadline - grace_ms and SIGKILLs it at kill_deadline unless a later
 * deadline arrives first.  tty_fd >= 0: make the group the terminal's
 * foreground process group.  Returns false with errno set when the
 * supervisor cannot be started; then no command runs.
 */
/*
 * Descriptors (3 and up) the command keeps, at most SV_MAX_KEEP: every
 * other one is closed before the command starts.  With set_listen_pid the
 * command's LISTEN_PID is its own pid (socket activation).  Call before
 * sv_start.
 */
#define SV_MAX_KEEP 64
extern void sv_keep_fds(const int *fds, int n, bool set_listen_pid);

extern bool sv_start(sv_run *r, const char *path, char *const argv[], char *const envp[],
					 int64_t kill_deadline, int64_t grace_ms, int tty_fd);

/* Pass a new kill deadline to the supervisor (never blocks). */
extern void sv_set_deadline(sv_run *r, int64_t kill_deadline);

/*
 * Signal the whole group; a no-op once the group is gone, so a reused
 * process group id is never signalled.  Returns false if nothing was sent.
 */
extern bool sv_signal(sv_run *r, int sig);

/*
 * Read reports, reap, see the supervisor stop or continue and the command
 * end (its pidfd), and send a liveness ping when one is due (never
 * blocks); updates *r.
 */
extern void sv_poll(sv_run *r);

/*
 * Is the supervisor frozen: stopped, or a ping unanswered for
 * SV_UNRESPONSIVE_MS?  Then only the wrapper can act for it.
 */
extern bool sv_sup_frozen(const sv_run *r, int64_t now);

/*
 * Is the command itself stopped (SIGSTOP, tracing stop), as /proc shows it,
 * or not there at all under a supervisor stopped before its fork?
 */
extern bool sv_command_stopped(const sv_run *r);

/* Close the pipes of a run whose group is gone. */
extern void sv_finish(sv_run *r);

/*
 * Reap strays (processes that left a command's group and were orphaned to
 * us): every zombie child of ours outside the n_live process groups in
 * live, which their own sv_poll reaps (n_live 0: every zombie child; < 0:
 * none).
 */
extern void sv_reap_strays(const pid_t *live, int n_live);

/* Make this process a subreaper, so that orphans of the command are ours to reap. */
extern void sv_become_subreaper(void);

/* Start the command with sig ignored (it was when the wrapper started). */
extern void sv_keep_ignored(int sig);

#endif							/* SUPERVISE_H */
