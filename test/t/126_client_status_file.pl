# G9: a command may exit with any status, pg_leader's own included:
# --status-file FILE tells them apart.  It is created empty at start and
# holds "command N" when N is the command's own status, or
# "pg_leader N WHY" when N is pg_leader's; the outcome replaces the empty
# file by a rename.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_status_file');
my $sf = "$dir/status";

sub run_pgl
{
	my (@args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), 'run', '-d', $dsn, '--status-file', $sf, @args ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	return ($? >> 8, $err);
}

# the command's own 75
my ($rc, $err) = run_pgl('-l', 'sf-key', '--ttl', '5s', '--', 'sh', '-c', 'exit 75');
is($rc, 75, 'a command exiting 75: pg_leader exits 75') or diag($err);
is(slurp_file($sf), "command 75\n", 'the status file says the command gave it');

# pg_leader's own 75: the lease is held by someone else
$node->safe_psql('postgres', "SELECT le_acquire('sf-held', 'other', '1 minute')");
($rc, $err) = run_pgl('-l', 'sf-held', '--ttl', '5s', '--no-wait', '--', 'true');
is($rc, 75, '--no-wait on a held lease: pg_leader exits 75') or diag($err);
is(slurp_file($sf), "pg_leader 75 not_acquired\n", 'the status file says pg_leader gave it');

# a signal to pg_leader
my $pid = fork();
die unless defined $pid;
if ($pid == 0)
{
	$SIG{$_} = 'DEFAULT' for qw(PIPE INT TERM HUP);
	open(STDERR, '>', "$dir/sig.log") or die;
	exec(pg_leader_bin(), 'run', '-d', $dsn, '-l', 'sf-sig', '--ttl', '5s', '--status-file', $sf,
		'--', 'sleep', '60') or die;
}
ok(wait_for(sub { -e "$dir/sig.log" && slurp_file("$dir/sig.log") =~ /command_started/ }, 30), 'the command runs');
is(slurp_file($sf), '', 'the status file is empty while pg_leader runs');
my $inode = (stat($sf))[1];
kill 'TERM', $pid;
waitpid($pid, 0);
# the outcome is renamed over the empty file, never written into it: a
# reader never sees it emptied at exit
isnt((stat($sf))[1], $inode, 'the status file was replaced, not truncated');
is($? >> 8, 143, 'SIGTERM: 143');
is(slurp_file($sf), "pg_leader 143 signal\n", 'the status file says pg_leader gave 143');

# a usage error
($rc, $err) = run_pgl('-l', 'sf-key', '--ttl', '15', '--', 'true');
is($rc, 64, 'usage error: 64');
is(slurp_file($sf), "pg_leader 64 usage\n", 'the status file says pg_leader gave 64');

# status and release never write it at exit: refused, not left empty
for my $sub ('status', 'release')
{
	my ($out, $e2) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), $sub, '-d', $dsn, '-l', 'sf-key', '--status-file', $sf ],
		'<', \undef, '>', \$out, '2>', \$e2, IPC::Run::timeout(60));
	is($? >> 8, 64, "$sub --status-file: usage error 64");
	is(slurp_file($sf), "pg_leader 64 usage\n", "$sub --status-file: the file says so, not empty");
}

$node->stop;
done_testing();
