# G9: what pg_leader reports.  command_started names the command's pid as
# well as its process group; a command that exits on its own is never
# reported as stopped (no stopping_command, its own status), even when
# pg_leader learns of it only after the lease's deadline; status shows when
# the lease was acquired and the holder's role.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_logs_status');

# --- command_started: the command's pid -----------------------------------------
my $pidfile = "$dir/cmd.pid";
my $a = start_candidate(
	dsn => $dsn, key => 'pid-key', name => 'a', dir => $dir,
	opts => [ '--ttl', '5s' ],
	command => [ 'sh', '-c', "echo \$\$ > $pidfile; exec sleep 60" ]);
ok(wait_for(sub { -s $pidfile && slurp_file($a->{log}) =~ /command_started/ }, 30), 'the command runs');
my $cpid = slurp_file($pidfile);
chomp $cpid;
like(slurp_file($a->{log}), qr/command_started .*pid $cpid, process group \d+/,
	'command_started logs the command\'s pid and its group');

# --- status: acquired_at and the holder's role ----------------------------------
my $user = $node->safe_psql('postgres', 'SELECT current_user');
my ($out, $err) = ('', '');
IPC::Run::run([ pg_leader_cmd(), 'status', '-d', $dsn, '-l', 'pid-key', '--json' ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
my $st = eval { decode_json($out) } // [];
is($st->[0]{holder_role}, $user, 'status --json: the holder\'s role');
like($st->[0]{acquired_at} // '', qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/, 'status --json: acquired_at');
IPC::Run::run([ pg_leader_cmd(), 'status', '-d', $dsn, '-l', 'pid-key' ],
	'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
like($out, qr/^lease_key\s+holder\s+role\s+token\s+acquired_at\s+expires_at\s/m, 'status table: role and acquired_at columns');
like($out, qr/^pid-key\s+a\s+\Q$user\E\s+\d+\s+\S+Z\s+\S+Z\s+yes\s/m, 'status table: role and acquired_at values');
kill 'TERM', $a->{pid};
ok(wait_for(sub { defined reap($a) }, 30), 'pg_leader ends on SIGTERM');

# --- a command that exited on its own while pg_leader was frozen past the deadline
my $b = start_candidate(
	dsn => $dsn, key => 'own-exit', name => 'b', dir => $dir,
	opts => [ '--ttl', '2s' ],
	command => [ 'sh', '-c', 'sleep 1; exit 3' ]);
ok(wait_for(sub { -e $b->{log} && slurp_file($b->{log}) =~ /command_started/ }, 30), 'the short command runs');
kill 'STOP', $b->{pid};    # pg_leader alone: the supervisor sees the command exit
sleep 4;                   # past the lease's deadline
kill 'CONT', $b->{pid};
ok(wait_for(sub { defined reap($b) }, 30), 'pg_leader exits after SIGCONT');
my $log = slurp_file($b->{log});
unlike($log, qr/stopping_command/, 'a command that exited on its own is not reported as stopped')
  or diag($log);
like($log, qr/command_exited .*status 3/, 'its own status is logged');
is(reap($b), 3, 'pg_leader exits with the command\'s own status');

stop_all();
$node->stop;
done_testing();
