# G9: the supervisor caught at its two awkward instants (test/c/sv_stall.c, an
# LD_PRELOAD shim, stalls it there so the outcome does not depend on luck):
#  - stopped before it has forked the command (a group stop that early):
#    nothing can ever run, so the period ends (SIGKILL of the group,
#    release, exit 80) instead of being renewed for good;
#  - stopped right after the fork, before it reported the command's pid:
#    pg_leader finds the command itself and leaves it alone while it runs;
#    resumed, the supervisor's late report opens no second pidfd; the
#    command's status is returned;
#  - stalled between learning the command's exit status and reporting it,
#    long enough for pg_leader to kill the group itself: pg_leader still
#    exits with the command's own status, not 137.
# pg_leader runs with default signal dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_supervisor_races');
my $ttl = 2;

my $shim = "$dir/sv_stall.so";
my ($o, $e) = ('', '');
IPC::Run::run([ 'cc', '-Wall', '-Wextra', '-Werror', '-shared', '-fPIC',
		"$FindBin::RealBin/../c/sv_stall.c", '-ldl', '-o', $shim ], '>', \$o, '2>', \$e)
  or plan skip_all => "cannot build the shim (a C compiler is needed): $e";

# Is the lease's period over (released, expired or someone else's)?
sub period_over
{
	my ($key, $owner) = @_;
	my ($holder, undef, $valid) = split /\|/, lease_state($node, $key);
	return !defined $valid || $valid ne 't' || $holder ne $owner;
}

# Wait for pg_leader to exit; its status or undef.
sub wait_exit
{
	my ($c, $secs) = @_;
	return wait_for(sub { defined reap($c) }, $secs) ? $c->{status} : undef;
}

# --- the supervisor stops before the command exists ---------------------------------
{
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LE_SV_STALL} = 'fork';
	my $ran = "$dir/early.ran";
	my $c = start_candidate(dir => $dir, name => 'early', dsn => $dsn, key => 'early',
		opts => [ '--ttl', "${ttl}s" ],
		command => [ 'sh', '-c', "touch $ran; while :; do sleep 0.1; done" ]);
	ok(wait_for(sub { log_has($c, qr/command_started/) }, 30), 'early stop: the supervisor was started');
	my $t0 = time();
	my $w = wait_for(sub { period_over('early', 'early') }, $ttl + 4);
	my $took = defined $w ? time() - $t0 : undef;
	note(sprintf('supervisor stopped before the fork -> period over %s',
			defined $took ? sprintf('%.0f ms', 1000 * $took) : 'never (> ttl + 4 s)'));
	ok(defined $took && $took < $ttl + 1, 'early stop: the period ends within ttl + 1 s');
	ok(!-e $ran, 'early stop: the command never ran');
	is(wait_exit($c, 10), 80, 'early stop: exit 80');
	ok(log_has($c, qr/stopping_command .*reason=group_stopped/), 'early stop: reason group_stopped logged');
	like(lease_state($node, 'early'), qr/\|f$/, 'early stop: the lease was released')
	  if defined $took && $took < $ttl;
	kill 'KILL', $c->{pid} unless defined reap($c);
}

# pidfds pg_leader holds.
sub pidfds
{
	my ($pid) = @_;
	my $n = 0;
	for my $fd (glob("/proc/$pid/fd/*"))
	{
		my $l = readlink($fd) // '';
		$n++ if $l =~ /pidfd/;
	}
	return $n;
}

# Parent pid of a process, or 0.
sub ppid_of
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $line = <$fh>;
	return $line =~ /\)\s+\S+\s+(\d+)/ ? $1 : 0;
}

# --- the supervisor stops after the fork, before its report ------------------------
{
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LE_SV_STALL} = 'forked';
	my $pidf = "$dir/mid.pid";
	my $go = "$dir/mid.go";
	my $c = start_candidate(dir => $dir, name => 'mid', dsn => $dsn, key => 'mid',
		opts => [ '--ttl', "${ttl}s" ],
		command => [ 'sh', '-c', "echo \$\$ > $pidf; while [ ! -e $go ]; do sleep 0.1; done; exit 4" ]);
	ok(wait_for(sub { -s $pidf }, 30), 'stop after fork: the command runs');
	chomp(my $pid = slurp_file($pidf));
	my $sup = ppid_of($pid);
	my $tok = (split /\|/, lease_state($node, 'mid'))[1];
	usleep(1_500_000);
	ok(alive($pid), 'stop after fork: the running command is left alone');
	is(lease_state($node, 'mid'), "mid|$tok|t", 'stop after fork: the same period goes on');
	is(pidfds($c->{pid}), 1, 'stop after fork: pg_leader found the command (one pidfd)');
	kill 'CONT', $sup;
	usleep(500_000);
	is(pidfds($c->{pid}), 1, 'stop after fork: the late report opens no second pidfd');
	open(my $fh, '>', $go) or die;
	close($fh);
	is(wait_exit($c, 20), 4, 'stop after fork: pg_leader exits with the command\'s status');
	like(lease_state($node, 'mid'), qr/\|f$/, 'stop after fork: the lease was released');
	kill 'KILL', $c->{pid} unless defined reap($c);
}

# --- the supervisor stalls between the command's exit and its report ---------------------
{
	local $ENV{LD_PRELOAD} = $shim;
	local $ENV{LE_SV_STALL} = 'reap';
	my $c = start_candidate(dir => $dir, name => 'late', dsn => $dsn, key => 'late',
		opts => [ '--ttl', "${ttl}s" ],
		command => [ 'sh', '-c', 'sleep 0.5; exit 3' ]);
	is(wait_exit($c, 30), 3, 'stalled report: pg_leader exits with the command\'s own status');
	ok(log_has($c, qr/command_exited .*status 3/), 'stalled report: status 3 logged');
	like(lease_state($node, 'late'), qr/\|f$/, 'stalled report: the lease was released');
	kill 'KILL', $c->{pid} unless defined reap($c);
}

done_testing();
