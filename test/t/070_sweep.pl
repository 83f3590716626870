# G6: the bad-input and misuse sweep (test/sweep/sweep.py) on a
# primary with a streaming hot standby.  The sweep calls every SQL function of
# the installed extension (read from pg_proc at run time) with edge values of
# each argument and in aborted, read-only and prepared transactions, several
# times per statement, as a role without privileges, on the standby and while
# another session drops the extension, and every pg_leader option listed by
# --help with bad values; each case must give a result or a documented
# SQLSTATE (exit status for pg_leader), change nothing when it fails and crash
# nothing.  Here: the sweep passes, and neither server log shows a crash.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use Time::HiRes qw(time);

my $python = '/usr/bin/python3';    # Debian's, with python3-psycopg2
plan skip_all => 'python3-psycopg2 is not installed'
  unless system($python, '-c', 'import psycopg2') == 0;

my $primary = le_node('primary', init => { allows_streaming => 1 }, conf => "max_prepared_transactions = 10\n");
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

my $testdir = $ENV{TESTDIR} // '.';
my $built = "$testdir/src/client/pg_leader";
my $pg_leader = -x $built ? $built : 'pg_leader';

my $start = time;
my ($stdout, $stderr) = ('', '');
my $ok = IPC::Run::run(
	[
		$python, "$testdir/test/sweep/sweep.py",
		'--dsn', $primary->connstr('postgres'),
		'--standby-dsn', $standby->connstr('postgres'),
		'--pg-leader', $pg_leader,
		'--docs', $testdir
	],
	'>', \$stdout, '2>', \$stderr);
my $secs = time - $start;
note $stdout;
note $stderr if $stderr ne '';
like($stdout, qr/^sweep: \d+ functions, \d+ cases, \d+ failures/m, 'the sweep ran to the end and printed its case count');
ok($ok, 'every case of the sweep gave a result or a documented SQLSTATE and changed nothing when it failed')
  or diag join("\n", grep { /^FAILED|^    case:/ } split /\n/, $stdout);
note sprintf 'sweep run time: %.1f s', $secs;

for my $node ($primary, $standby)
{
	my $log = slurp_file($node->logfile);
	my @crash = grep { /terminated by signal|PANIC|TRAP:/ } split /\n/, $log;
	is(scalar(@crash), 0, $node->name . ': no crash in the server log')
	  or diag join("\n", @crash);
}

done_testing();
