# G9: a signal ignored when pg_leader starts stays ignored, as nohup and shells
# (SIGINT of a background job) expect: with SIGHUP or SIGINT ignored, that
# signal neither stops the command nor ends pg_leader, and the command
# starts with it ignored too; SIGTERM still ends pg_leader.  Every other
# signal has its default disposition.
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
		exec(pg_leader_bin(), 'run', '-d', $dsn, '-l', "nohup-$sig", '--ttl', '3s', '--',
			'sh', '-c', "grep -E '^Sig(Ign|Blk)' /proc/self/status > '$dir/$sig.sig'; exec sleep 60")
		  or die;
	}
	ok(wait_for(sub { -e $log && slurp_file($log) =~ /command_started/ }, 30), "SIG$sig ignored: the command runs");
	kill $sig, $pid;
	sleep 1;
	is(waitpid($pid, WNOHANG), 0, "SIG$sig ignored at start: pg_leader still runs after SIG$sig");
	unlike(slurp_file($log), qr/stopping_command/, "SIG$sig ignored: the command was not stopped");
	# nohup's promise is for the command too: a hung-up terminal signals its group
	# (signals 32 and up: glibc's own, which sigaction cannot reset)
	my $sigs = slurp_file("$dir/$sig.sig");
	my ($ign) = $sigs =~ /^SigIgn:\s*([0-9a-f]+)$/m;
	is(hex($ign // 'ffffffff') & 0x7fffffff, $sig eq 'HUP' ? 1 : 2,
		"SIG$sig ignored at start: ignored by the command too, nothing else") or diag($sigs);
	like($sigs, qr/^SigBlk:\s*0+$/m, "SIG$sig ignored at start: the command blocks nothing");
	kill 'TERM', $pid;
	waitpid($pid, 0);
	is($? >> 8, 143, "SIG$sig ignored: SIGTERM still ends it (143)") or diag(slurp_file($log));
}

$node->stop;
done_testing();
