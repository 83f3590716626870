# G9: a leader that does not work must not keep the lease: pg_leader with
# default signal dispositions, real pipes and real signals.
#  - stderr is a pipe nobody reads, filled by the command, which then
#    exits: the lease is released at once, and pg_leader exits although
#    its log cannot be written; SIGTERM is acted on while stderr is full;
#  - kill -STOP -- -PGID (the command's group: supervisor and command):
#    the group is SIGKILLed and the lease released (exit 80);
#  - only the supervisor is stopped, then the command exits: its end is
#    seen (pidfd) although it stays a zombie of the stopped supervisor,
#    the group is killed, the command reaped with its own status, the
#    lease released;
#  - stderr is full before pg_leader starts and the server is unreachable:
#    pg_leader exits (69) instead of hanging on its error message;
#  - stdout and stderr closed at start: they are /dev/null, so log lines
#    never land in a descriptor pg_leader opened for itself.
# Each case measures from the test the time from the command's end (or
# the stop) to the lease row showing the period over; the bound is
# ttl + 1 s.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Fcntl;
use IO::Select;
use POSIX ();
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_stalls');
my $ttl = 2;

# Parent pid of a process, or 0.
sub ppid_of
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $line = <$fh>;
	return $line =~ /\)\s+\S+\s+(\d+)/ ? $1 : 0;
}

# Is the lease's period over (released, expired or someone else's)?
sub period_over
{
	my ($key, $owner) = @_;
	my ($holder, undef, $valid) = split /\|/, lease_state($node, $key);
	return !defined $valid || $valid ne 't' || $holder ne $owner;
}

# Wait for the period of $owner on $key to end; seconds since $t0, or undef
# if it did not end within ttl + 4 s.
sub time_to_end
{
	my ($key, $owner, $t0) = @_;
	my $w = wait_for(sub { period_over($key, $owner) }, $ttl + 4);
	return defined $w ? time() - $t0 : undef;
}

# Start pg_leader run with stderr to the write end of a pipe; returns the
# candidate and the read end (the caller decides whether to read it).
sub start_piped
{
	my ($name, $command, @opts) = @_;
	pipe(my $r, my $w) or die "pipe: $!";
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		close($r);
		POSIX::setpgid(0, 0);
		delete $ENV{PGAPPNAME};
		open(STDOUT, '>', '/dev/null') or die;
		open(STDERR, '>&', $w) or die;
		LeClientTest::default_signals();
		exec('env', '--default-signal', pg_leader_bin(), 'run', '-d', $dsn, '-l', $name,
			'--owner', $name, '--ttl', "${ttl}s", @opts, '--', @$command)
		  or die "exec: $!";
	}
	close($w);
	return ({ pid => $pid, name => $name }, $r);
}

# Read lines from $r until one matches $re (or 30 s pass); returns all read.
sub read_until
{
	my ($r, $re) = @_;
	my $sel = IO::Select->new($r);
	my $text = '';
	my $t0 = time();
	while (time() - $t0 < 30 && $text !~ $re)
	{
		next unless $sel->can_read(0.2);
		my $n = sysread($r, my $buf, 65536);
		last unless $n;
		$text .= $buf;
	}
	return $text;
}

# Wait for pg_leader to exit; its status or undef.
sub wait_exit
{
	my ($c, $secs) = @_;
	return wait_for(sub { defined reap($c) }, $secs) ? $c->{status} : undef;
}

my %figures;

# --- 1. stderr is a full pipe nobody reads, the command exits ----------------------
{
	my $done = "$dir/full.done";
	my ($c, $r) = start_piped('full',
		[ 'sh', '-c',
			"head -c 1000000 /dev/zero >&2 & sleep 1; date +%s.%N > $done; exit 3" ]);
	my $seen = read_until($r, qr/command_started/);
	like($seen, qr/command_started/, 'full pipe: the command started (log read so far)');
	# from here on nobody reads: the command's writer fills the pipe
	ok(wait_for(sub { -s $done }, 20), 'full pipe: the command ended');
	my $t0 = time();
	my $took = time_to_end('full', 'full', $t0);
	ok(defined $took && $took < $ttl + 1,
		'full pipe: the lease is released within ttl + 1 s of the command\'s end');
	$figures{full} = $took;
	note(sprintf('full stderr pipe: command end -> period over %s',
			defined $took ? sprintf('%.0f ms', 1000 * $took) : 'never (> ttl + 4 s)'));
	is(wait_exit($c, 10), 3, 'full pipe: pg_leader exits with the command\'s status although stderr is stuck');
	close($r);
}

# --- 2. stderr full while the command runs: SIGTERM still stops it -----------------
{
	my $pidf = "$dir/fullterm.pid";
	my ($c, $r) = start_piped('fullterm',
		[ 'sh', '-c', "echo \$\$ > $pidf; head -c 1000000 /dev/zero >&2 & while :; do sleep 0.1; done" ]);
	read_until($r, qr/command_started/);
	ok(wait_for(sub { -s $pidf }, 20), 'full pipe, SIGTERM: the command runs');
	chomp(my $pid = slurp_file($pidf));
	usleep(500_000);    # the pipe is full by now
	my $t0 = time();
	kill 'TERM', $c->{pid};
	my $took = time_to_end('fullterm', 'fullterm', $t0);
	ok(defined $took && $took < $ttl + 1, 'full pipe, SIGTERM: the lease is released');
	$figures{fullterm} = $took;
	note(sprintf('full stderr pipe: SIGTERM -> period over %s',
			defined $took ? sprintf('%.0f ms', 1000 * $took) : 'never (> ttl + 4 s)'));
	is(wait_exit($c, 10), 143, 'full pipe, SIGTERM: exit 143');
	ok(!alive($pid), 'full pipe, SIGTERM: the command is gone');
	close($r);
}

# --- 3. kill -STOP -- -PGID: supervisor and command stopped -------------------------
{
	my $pidf = "$dir/grp.pid";
	my $c = start_candidate(dir => $dir, name => 'grp', dsn => $dsn, key => 'grp',
		opts => [ '--ttl', "${ttl}s" ],
		command => [ 'sh', '-c', "echo \$\$ > $pidf; while :; do sleep 0.1; done" ]);
	ok(wait_for(sub { -s $pidf }, 30), 'group stop: the command runs');
	chomp(my $pid = slurp_file($pidf));
	my $pgid = pgid_of($pid);
	my $sup = ppid_of($pid);
	is($pgid, $sup, 'group stop: the command\'s group is its supervisor\'s');
	my $t0 = time();
	kill 'STOP', -$pgid;
	my $took = time_to_end('grp', 'grp', $t0);
	ok(defined $took && $took < $ttl + 1, 'group stop: the period ends within ttl + 1 s of the stop');
	$figures{grp} = $took;
	note(sprintf('kill -STOP -- -PGID -> period over %s',
			defined $took ? sprintf('%.0f ms', 1000 * $took) : 'never (> ttl + 4 s)'));
	ok(wait_for(sub { !alive($pid) && !alive($sup) }, 5), 'group stop: command and supervisor were killed');
	is(wait_exit($c, 10), 80, 'group stop: exit 80');
	ok(log_has($c, qr/stopping_command .*reason=group_stopped/), 'group stop: reason group_stopped logged');
	like(lease_state($node, 'grp'), qr/\|f$/, 'group stop: the lease was released, not left to expire')
	  if defined $took && $took < $ttl;
	kill 'CONT', -$pgid;
	kill 'KILL', -$pgid;
}

# --- 4. only the supervisor stopped, then the command exits ---------------------------
{
	my $pidf = "$dir/zomb.pid";
	my $done = "$dir/zomb.done";
	my $c = start_candidate(dir => $dir, name => 'zomb', dsn => $dsn, key => 'zomb',
		opts => [ '--ttl', "${ttl}s" ],
		command => [ 'sh', '-c', "echo \$\$ > $pidf; sleep 1.5; date +%s.%N > $done; exit 3" ]);
	ok(wait_for(sub { -s $pidf }, 30), 'supervisor stop: the command runs');
	chomp(my $pid = slurp_file($pidf));
	my $sup = ppid_of($pid);
	kill 'STOP', $sup;
	ok(wait_for(sub { -s $done }, 20), 'supervisor stop: the command ended');
	my $t0 = time();
	my $took = time_to_end('zomb', 'zomb', $t0);
	ok(defined $took && $took < $ttl + 1,
		'supervisor stop: the lease is released within ttl + 1 s of the command\'s end');
	$figures{zomb} = $took;
	note(sprintf('supervisor stopped, command exits -> period over %s',
			defined $took ? sprintf('%.0f ms', 1000 * $took) : 'never (> ttl + 4 s)'));
	is(wait_exit($c, 10), 3, 'supervisor stop: pg_leader exits with the command\'s own status');
	ok(!alive($sup), 'supervisor stop: the stopped supervisor was killed');
	ok(log_has($c, qr/killing_command .*supervisor is stopped/), 'supervisor stop: logged');
	like(lease_state($node, 'zomb'), qr/\|f$/, 'supervisor stop: the lease was released')
	  if defined $took && $took < $ttl;
	kill 'CONT', $sup;
}

# --- a supervisor stopped and resumed while the command runs: nothing is stopped --------
{
	my $pidf = "$dir/pause.pid";
	my $c = start_candidate(dir => $dir, name => 'pause', dsn => $dsn, key => 'pause',
		opts => [ '--ttl', "${ttl}s" ],
		command => [ 'sh', '-c', "echo \$\$ > $pidf; while :; do sleep 0.1; done" ]);
	ok(wait_for(sub { -s $pidf }, 30), 'supervisor pause: the command runs');
	chomp(my $pid = slurp_file($pidf));
	my $sup = ppid_of($pid);
	my $tok = (split /\|/, lease_state($node, 'pause'))[1];
	kill 'STOP', $sup;
	usleep(1_500_000);
	kill 'CONT', $sup;
	usleep(500_000);
	ok(alive($pid) && alive($sup), 'supervisor pause: the running command is left alone');
	is(lease_state($node, 'pause'), "pause|$tok|t", 'supervisor pause: the same period goes on');
	kill 'TERM', $c->{pid};
	is(wait_exit($c, 20), 143, 'supervisor pause: SIGTERM ends it as usual');
}

# --- stderr already full, the server unreachable: pg_leader still exits (69) -----------
{
	pipe(my $r, my $w) or die "pipe: $!";
	my $flags = fcntl($w, F_GETFL, 0);
	fcntl($w, F_SETFL, $flags | O_NONBLOCK);
	1 while defined syswrite($w, 'x' x 4096);
	fcntl($w, F_SETFL, $flags);
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		close($r);
		open(STDOUT, '>', '/dev/null') or die;
		open(STDERR, '>&', $w) or die;
		LeClientTest::default_signals();
		exec('env', '--default-signal', pg_leader_bin(), 'run', '-d', "host=$dir port=1 dbname=postgres",
			'-l', 'nostart', '--', 'true')
		  or die "exec: $!";
	}
	close($w);
	my $c = { pid => $pid, name => 'nostart' };
	my $st = wait_exit($c, 10);
	is($st, 69, 'full pipe, no server: pg_leader exits 69 although stderr is stuck');
	kill 'KILL', $pid unless defined $st;
	close($r);
}

# --- stdout and stderr closed: they become /dev/null, never an internal descriptor ------
{
	my $pidf = "$dir/closed.pid";
	my $bin = pg_leader_bin();
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		delete $ENV{PGAPPNAME};
		LeClientTest::default_signals();
		exec('sh', '-c',
			"echo \$\$ > $pidf; exec $bin run -d '$dsn' -l closed --owner closed -v --ttl ${ttl}s -- sleep 3 >&- 2>&-")
		  or die "exec: $!";
	}
	ok(wait_for(sub { -s $pidf }, 10), 'closed stderr: pg_leader started');
	chomp(my $p = slurp_file($pidf));
	ok(wait_for(sub { period_over('closed', 'closed') ? 0 : 1 }, 20), 'closed stderr: it leads');
	is(readlink("/proc/$p/fd/2") // '', '/dev/null', 'closed stderr: fd 2 is /dev/null');
	is(readlink("/proc/$p/fd/1") // '', '/dev/null', 'closed stdout: fd 1 is /dev/null');
	my $c = { pid => $pid, name => 'closed' };
	is(wait_exit($c, 20), 0, 'closed stderr: the command\'s status');
	kill 'KILL', $pid unless defined reap($c);
}

done_testing();
