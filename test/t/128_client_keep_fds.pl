# G9: descriptors the caller passed.  By default the command gets only 0, 1
# and 2; with --keep-fds also every descriptor pg_leader got; with
# LISTEN_PID naming pg_leader and LISTEN_FDS=N (socket activation) also
# 3 .. 3+N-1, and its LISTEN_PID is the command's own pid.  pg_leader's own
# descriptors (libpq sockets, pipes, pidfds, timerfds) never reach it: the
# command's /proc/PID/fd is checked exactly.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use POSIX ();
use Time::HiRes qw(usleep);
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_keep_fds');

# Start pg_leader with file "$dir/$name.out" open as descriptor $fd; returns
# (pg_leader's pid, the command's pid, its descriptors, its environment).
sub start_with_fd
{
	my ($name, $fd, $opts, $env) = @_;
	my $pidfile = "$dir/$name.pid";
	my $log = "$dir/$name.log";
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		POSIX::setpgid(0, 0);
		delete $ENV{PGAPPNAME};
		open(STDOUT, '>>', $log) or die;
		open(STDERR, '>>', $log) or die;
		$SIG{$_} = 'DEFAULT' for qw(PIPE INT TERM HUP QUIT CHLD);
		open(my $fh, '>', "$dir/$name.out") or die;
		my $n = fileno($fh);
		POSIX::dup2($n, $fd) or die "dup2: $!";
		for my $i (3 .. 255)
		{
			POSIX::close($i) unless $i == $fd;
		}
		$ENV{$_} = $env->{$_} eq 'SELF' ? $$ : $env->{$_} for keys %{ $env // {} };
		exec(pg_leader_bin(), 'run', '-d', $dsn, '-l', "fd-$name", '--ttl', '5s', @$opts, '--',
			'sh', '-c', "echo pass-$name >&$fd; echo \$\$ > $pidfile; exec sleep 60")
		  or die;
	}
	wait_for(sub { -s $pidfile }, 30) or die "the command of $name did not start: " . slurp_file($log);
	my $cpid = slurp_file($pidfile);
	chomp $cpid;
	usleep(100_000);    # the exec of sleep
	opendir(my $d, "/proc/$cpid/fd") or die;
	my @fds = sort { $a <=> $b } grep { /^\d+$/ } readdir($d);
	closedir($d);
	my %env = map { /^([^=]*)=(.*)$/s ? ($1 => $2) : () } split /\0/, slurp_file("/proc/$cpid/environ");
	return ($pid, $cpid, join(',', @fds), \%env);
}

sub finish
{
	my ($pid) = @_;
	kill 'TERM', $pid;
	waitpid($pid, 0);
}

my ($pid, $cpid, $fds, $env) = start_with_fd('default', 5, []);
is($fds, '0,1,2', 'by default the command gets 0, 1 and 2 only');
finish($pid);
is(slurp_file("$dir/default.out"), '', 'the passed descriptor was not the command\'s');

($pid, $cpid, $fds, $env) = start_with_fd('keep', 5, ['--keep-fds']);
is($fds, '0,1,2,5', '--keep-fds: the command gets the caller\'s descriptor 5 and nothing of pg_leader\'s');
like(readlink("/proc/$cpid/fd/5") // '', qr{/keep\.out$}, '--keep-fds: descriptor 5 is the caller\'s file');
finish($pid);
is(slurp_file("$dir/keep.out"), "pass-keep\n", '--keep-fds: the command wrote through it');

($pid, $cpid, $fds, $env) = start_with_fd('listen', 3, [], { LISTEN_FDS => '1', LISTEN_PID => 'SELF' });
is($fds, '0,1,2,3', 'LISTEN_FDS=1 for our pid: the command gets descriptor 3');
is($env->{LISTEN_PID}, $cpid, 'its LISTEN_PID is the command\'s own pid');
is($env->{LISTEN_FDS}, '1', 'LISTEN_FDS is passed on');
finish($pid);
is(slurp_file("$dir/listen.out"), "pass-listen\n", 'socket activation: the command wrote through it');

($pid, $cpid, $fds, $env) = start_with_fd('other', 3, [], { LISTEN_FDS => '1', LISTEN_PID => '1' });
is($fds, '0,1,2', 'LISTEN_PID of another process: closed as by default');
finish($pid);

$node->stop;
done_testing();
