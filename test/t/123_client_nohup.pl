# G9: a signal ignored when pg_leader starts stays ignored, as nohup and shells
# (SIGINT of a background job) expect: with SIGHUP or SIGINT ignored, that
# signal neither stops the command nor ends pg_leader; SIGTERM still does.
# Every other signal has its default disposition.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use POSIX qw(:sys_wait_h);
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_nohup');

for my $sig ('HUP', 'INT')
{
	my $log = "$dir/$sig.log";
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		POSIX::setpgid(0, 0);
		delete $ENV{PGAPPNAME};
		open(STDOUT, '>>', $log) or die;
		open(STDERR, '>>', $log) or die;
		$SIG{$_} = 'DEFAULT' for qw(PIPE INT TERM HUP QUIT CHLD);
		POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new());
		$SIG{$sig} = 'IGNORE';    # as nohup (HUP) or a shell's background job (INT)
		exec(pg_leader_bin(), 'run', '-d', $dsn, '-l', "nohup-$sig", '--ttl', '3s', '--', 'sleep', '60')
		  or die;
	}
	ok(wait_for(sub { -e $log && slurp_file($log) =~ /command_started/ }, 30), "SIG$sig ignored: the command runs");
	kill $sig, $pid;
	sleep 1;
	is(waitpid($pid, WNOHANG), 0, "SIG$sig ignored at start: pg_leader still runs after SIG$sig");
	unlike(slurp_file($log), qr/stopping_command/, "SIG$sig ignored: the command was not stopped");
	kill 'TERM', $pid;
	waitpid($pid, 0);
	is($? >> 8, 143, "SIG$sig ignored: SIGTERM still ends it (143)") or diag(slurp_file($log));
}

$node->stop;
done_testing();
