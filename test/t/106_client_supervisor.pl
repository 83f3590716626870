# G5: The command's supervisor.  It is the command's
# parent and leads the command's process group (so the command never runs
# without it, and no reused group id is signalled); frozen past an old
# deadline while renewals went on, it reads the newer deadline before it
# acts; its death is "guard lost" (command group killed, lease released,
# exit 82); a command stopped by a signal is stopped for good (exit 80);
# orphans of the command are reaped and killed with its group; with a
# controlling terminal the command is in the terminal's foreground group
# (an interactive command reads it instead of stopping with SIGTTIN).
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IO::Pty;
use POSIX ();
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_supervisor');

# Parent pid of a process, or 0.
sub ppid_of
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $line = <$fh>;
	return $line =~ /\)\s+\S+\s+(\d+)/ ? $1 : 0;
}

# A command that writes its pid, starts a grandchild ignoring SIGTERM, and beats.
sub start_with_grandchild
{
	my ($name, @opts) = @_;
	my $pidf = "$dir/$name.pid";
	my $gcf = "$dir/$name.gc";
	my $c = start_candidate(dir => $dir, name => $name, dsn => $dsn, key => $name,
		opts => [ '--ttl', '3s', @opts ],
		command => [ 'sh', '-c',
			"echo \$\$ > $pidf; trap '' TERM; sleep 300 & echo \$! > $gcf; while :; do sleep 0.1; done" ]);
	wait_for(sub { -s $pidf && -s $gcf }, 30) or die "$name: command did not start";
	chomp(my $pid = slurp_file($pidf));
	chomp(my $gc = slurp_file($gcf));
	return ($c, $pid, $gc);
}

# --- structure: wrapper -> supervisor -> command, the supervisor leads the group ---
{
	my ($c, $pid, $gc) = start_with_grandchild('tree');
	my $sup = ppid_of($pid);
	isnt($sup, $c->{pid}, 'the command\'s parent is not pg_leader itself');
	is(ppid_of($sup), $c->{pid}, 'but its supervisor, a child of pg_leader');
	is(pgid_of($pid), $sup, 'the supervisor leads the command\'s process group');
	is(pgid_of($gc), $sup, 'grandchildren are in that group');
	kill 'TERM', $c->{pid};
	ok(wait_for(sub { defined reap($c) }, 20), 'SIGTERM: pg_leader exits');
	is($c->{status}, 143, 'with 128 + SIGTERM');
	ok(!alive($pid) && !alive($gc) && !alive($sup), 'command, grandchild and supervisor are gone');
}

# --- a frozen supervisor acts on the newest deadline, not a stale one ---------------
{
	my ($c, $pid, $gc) = start_with_grandchild('stale', '-v');
	my $sup = ppid_of($pid);
	my ($tok) = (split /\|/, lease_state($node, 'stale'))[1];
	kill 'STOP', $sup;
	usleep(4_000_000);    # past the deadline it knew (ttl 3 s); pg_leader renewed meanwhile
	kill 'CONT', $sup;
	usleep(700_000);
	ok(alive($pid), 'resumed supervisor does not stop the command on a stale deadline');
	ok(!log_has($c, qr/stopping_command/), 'nothing was stopped');
	is(lease_state($node, 'stale'), "stale|$tok|t", 'the same period goes on');
	kill 'TERM', $c->{pid};
	wait_for(sub { defined reap($c) }, 20);
}

# --- the supervisor dies: guard lost ---------------------------------------------
{
	my ($c, $pid, $gc) = start_with_grandchild('guard');
	my $sup = ppid_of($pid);
	my ($tok) = (split /\|/, lease_state($node, 'guard'))[1];
	kill 'KILL', $sup;
	ok(wait_for(sub { defined reap($c) }, 20), 'pg_leader exits when the supervisor is killed');
	is($c->{status}, 82, 'with status 82 (guard lost)');
	ok(!alive($pid) && !alive($gc), 'the command and its grandchild ignoring SIGTERM are gone');
	ok(log_has($c, qr/stopping_command .*reason=guard_lost/), 'guard_lost logged');
	is( $node->safe_psql('postgres',
			"SELECT end_reason FROM le_lease_history WHERE lease_key = 'guard' AND fencing_token = $tok"),
		'released', 'the lease was released');
}

# --- a stopped command is noticed and stopped for good --------------------------------
{
	my ($c, $pid, $gc) = start_with_grandchild('stopped', '--grace', '300ms');
	kill 'STOP', $pid;
	ok(wait_for(sub { defined reap($c) }, 20), 'pg_leader ends a command stopped by SIGSTOP');
	is($c->{status}, 80, 'with status 80');
	ok(log_has($c, qr/stopping_command .*reason=command_stopped: the command was stopped by signal 19/),
		'command_stopped logged with the signal');
	ok(!alive($pid) && !alive($gc), 'command and grandchild are gone');
}

# --- orphans of the command are reaped and killed with its group ----------------------
{
	my $orph = "$dir/orphan.pid";
	my $c = start_candidate(dir => $dir, name => 'orphan', dsn => $dsn, key => 'orphan',
		opts => [ '--ttl', '3s' ],
		command => [ 'sh', '-c', "sh -c 'trap \"\" TERM; sleep 300 & echo \$! > $orph' ; sleep 0.5; exit 3" ]);
	ok(wait_for(sub { defined reap($c) }, 30), 'the command exits, leaving an orphan behind');
	is($c->{status}, 3, 'pg_leader exits with the command\'s status');
	chomp(my $o = slurp_file($orph));
	ok(!alive($o), 'the orphan (ignoring SIGTERM) was killed with the command\'s group');
}

# --- a terminal: the command is in its foreground process group ---------------------
{
	my $pty = IO::Pty->new;
	my $log = "$dir/tty.log";
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		POSIX::setsid();
		$pty->make_slave_controlling_terminal();
		my $slave = $pty->slave;
		close($pty);
		open(STDIN, '<&', $slave) or die;
		open(STDOUT, '>&', $slave) or die;
		open(STDERR, '>>', $log) or die;
		delete $ENV{PGAPPNAME};
		LeClientTest::default_signals();
		exec('env', '--default-signal', pg_leader_bin(), 'run', '-d', $dsn, '-l', 'tty', '--ttl', '3s',
			'--', 'sh', '-c', 'read x; echo "got:$x"; exit 4') or die "exec: $!";
	}
	$pty->close_slave();
	my $c = { pid => $pid, log => $log };
	ok(wait_for(sub { log_has($c, qr/command_started/) }, 30), 'interactive command started');
	usleep(300_000);
	print $pty "hello\n";
	my $seen = '';
	my $t0 = time();
	while (time() - $t0 < 10 && $seen !~ /got:hello/)
	{
		my $rin = '';
		vec($rin, fileno($pty), 1) = 1;
		if (select($rin, undef, undef, 0.2) > 0)
		{
			my $buf;
			last unless sysread($pty, $buf, 1024);
			$seen .= $buf;
		}
	}
	like($seen, qr/got:hello/, 'the command read the terminal (it is in the foreground group, no SIGTTIN)');
	my $w = wait_for(sub { waitpid($pid, POSIX::WNOHANG()) == $pid }, 10);
	my $st = $? >> 8;
	if (!defined $w)
	{
		kill 'KILL', -$pid;
		waitpid($pid, 0);
	}
	ok(defined $w, 'pg_leader exits after the command');
	is($st, 4, 'with the command\'s status');
}

stop_all();
$node->stop;
done_testing();
