# The client library under AddressSanitizer/LeakSanitizer/UBSan and
# ThreadSanitizer: the probe program
# (test/c/le_probe.c) is built against a copy of the library built with
# src/client/Makefile's SANITIZE= (LeClientTest::build_probe) and runs
# the modes that exercise most code paths (api: period fd, request_stop,
# observer, free lease; order: fast periods and resigns; status: errors and
# backoff), and the group probe (test/c/le_group_probe.c: two members of
# a group moving partitions, one with slow callbacks, one deferring its
# releases, both leaving); any sanitizer report (memory
# error, leak, undefined behaviour, data race) fails the test.  Skipped
# when the compiler cannot build with a sanitizer.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my $cc = `sh -c 'command -v cc'`;
plan skip_all => 'no C compiler' unless $cc;

my ($node, $dsn, $dir) = start_node('client_san');
$node->safe_psql('postgres', 'CREATE ROLE nobody LOGIN');
# Build the probe and a copy of the library with -fsanitize=$san
# (src/client/Makefile's SANITIZE=); false if impossible.
sub build
{
	my ($san, $exe) = @_;
	my ($ok, $e) = build_probe($exe, $san);
	note("cannot build with -fsanitize=$san: $e") unless $ok;
	return $ok;
}

# Runs a probe; returns (exit status, stdout, stderr).
sub run_probe
{
	my ($exe, @args) = @_;
	my ($o, $e) = ('', '');
	local $ENV{ASAN_OPTIONS} = 'detect_leaks=1:abort_on_error=0:exitcode=66';
	local $ENV{UBSAN_OPTIONS} = 'print_stacktrace=1:halt_on_error=1:exitcode=66';
	local $ENV{TSAN_OPTIONS} = 'exitcode=66';
	IPC::Run::run([ $exe, @args ], '>', \$o, '2>', \$e, IPC::Run::timeout(180));
	return ($? >> 8, $o, $e);
}

my $nobody = $node->connstr('postgres') . ' user=nobody';
SKIP:
{
	skip 'cannot build with -fsanitize=address,undefined', 3
	  unless build('address,undefined', "$dir/probe_asan");
	for my $m ([ 'api', $dsn, 'asan-api' ], [ 'order', $dsn, 'asan-order', 2 ],
		[ 'status', $nobody, 'asan-status' ])
	{
		my ($rc, $o, $e) = run_probe("$dir/probe_asan", @$m);
		ok($rc == 0 && $e !~ /Sanitizer|runtime error/,
			"ASan/LSan/UBSan: mode $m->[0] runs clean (exit $rc)")
		  or diag("$o\n$e");
	}
}
SKIP:
{
	skip 'cannot build with -fsanitize=thread', 1 unless build('thread', "$dir/probe_tsan");
	for my $m ([ 'order', $dsn, 'tsan-order', 3 ])
	{
		my ($rc, $o, $e) = run_probe("$dir/probe_tsan", @$m);
		ok($rc == 0 && $e !~ /ThreadSanitizer/, "TSan: mode $m->[0] runs without data races (exit $rc)")
		  or diag("$o\n$e");
	}
}

# Two members of group san for a few seconds: partitions move from a (slow
# on_revoked) to b (defer_release), then back when b leaves.
$node->safe_psql('postgres', "SELECT le_group_create('san', 4)");
for my $san ('address,undefined', 'thread')
{
  SKIP:
	{
		my $exe = "$dir/group_probe_" . ($san =~ s/\W/_/gr);
		my ($ok, $e) = build_probe($exe, $san, 'le_group_probe.c');
		skip "cannot build the group probe with -fsanitize=$san", 1 unless $ok;
		local $ENV{ASAN_OPTIONS} = 'detect_leaks=1:abort_on_error=0:exitcode=66';
		local $ENV{UBSAN_OPTIONS} = 'print_stacktrace=1:halt_on_error=1:exitcode=66';
		local $ENV{TSAN_OPTIONS} = 'exitcode=66';
		my ($oa, $ea, $ob, $eb) = ('', '', '', '');
		my $ha = IPC::Run::start([ $exe, $dsn, 'san', 'a', 7, 300 ], '>', \$oa, '2>', \$ea,
			IPC::Run::timeout(180));
		sleep 1;
		my $hb = IPC::Run::start([ $exe, $dsn, 'san', 'b', 4, 200, 'defer' ], '>', \$ob, '2>', \$eb,
			IPC::Run::timeout(180));
		$hb->finish;
		my $rb = $? >> 8;
		$ha->finish;
		my $ra = $? >> 8;
		ok($ra == 0 && $rb == 0 && "$ea$eb" !~ /Sanitizer|runtime error/
			  && $oa =~ /^order ok$/m && $ob =~ /^order ok$/m && $oa =~ /^revoked \d+ \d+ revoked /m,
			"$san: two group members moving partitions run clean (exit $ra, $rb)")
		  or diag("$oa\n$ea\n$ob\n$eb");
	}
}

$node->stop;
done_testing();
