# G5 and the fence's look at a page by its shared buffer (src/lease_rows.c,
# le_rows_page_unchanged): a rewrite of le_lease (here CLUSTER) releases its
# locks before it drops the old file's buffers, so a takeover can commit in
# the new file while the old file's page, unchanged, is still in its buffer.
# A warm writer that wrote with the old token before must still fail at
# COMMIT (LE001), and none of its rows may commit (a fence that
# trusted the old buffer let them commit).  gdb holds the CLUSTER's backend where it drops the old file
# (smgrdounlinkall), after its commit and the release of its locks.  The
# second part holds a TRUNCATE of le_lease that also granted the key anew,
# the third a writer between its commit-time check and its
# commit record.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;

# wal_level = replica (at minimal the page LSNs vouch for nothing); shared
# buffers large enough that the CLUSTER's own work does not evict the old
# file's lease page before the writer's COMMIT looks at it.
my $node = le_node('rewrite_race', init => { allows_streaming => 1 }, conf => "autovacuum = off\nshared_buffers = 128MB\n");
$node->safe_psql('postgres', q{
CREATE TABLE warm (id serial PRIMARY KEY, note text, fencing_token bigint NOT NULL);
SELECT le_protect('warm', 'kw');
});
my $tok = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('kw', 'A', '1 hour')");
# Nothing left on the lease row's page for the CLUSTER's scan to prune (which
# would move the old page's LSN and hide what is tested).
$node->safe_psql('postgres', 'VACUUM le_lease');
my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);

sub session
{
	my %s = (in => '', out => '', err => '');
	$s{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres') ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err}, $timer);
	return \%s;
}

sub run_until
{
	my ($s, $sql, $re) = @_;
	$s->{in} .= $sql;
	$s->{h}->pump until $s->{out} =~ $re || $s->{err} =~ /ERROR/ || $timer->is_expired;
}

# Send sql to session s and pump it for up to secs seconds; true if its
# output matched re by then.
sub answers_within
{
	my ($s, $sql, $re, $secs) = @_;
	my $until = time + $secs;
	$s->{in} .= $sql;
	while (time < $until)
	{
		$s->{h}->pump_nb;
		return 1 if $s->{out} =~ $re;
		select(undef, undef, undef, 0.1);
	}
	return 0;
}

# Attach gdb to backend pid with a breakpoint on function, then send sql to
# session s, which the breakpoint stops; returns gdb's handle and output.
sub hold_in
{
	my ($pid, $function, $s, $sql) = @_;
	my %g = (in => "set pagination off\nbreak $function\ncontinue\n", out => '', err => '');
	$g{h} = IPC::Run::start([ 'gdb', '-q', '-nx', '-p', $pid ],
		'<', \$g{in}, '>', \$g{out}, '2>', \$g{err}, $timer);
	$g{h}->pump until $g{out} =~ /Continuing/ || $timer->is_expired;
	$s->{in} .= $sql;
	$s->{h}->pump_nb;
	$g{h}->pump until $g{out} =~ /Breakpoint 1,/ || $timer->is_expired;
	return \%g;
}

# Let the backend gdb holds go on.
sub release_hold
{
	my ($g) = @_;
	$g->{in} .= "detach\nquit\n";
	$g->{h}->finish;
}

# W: three one-row transactions (the last judged by its page's LSN, as a
# warm session's are), then a write in an open transaction.
my $w = session();
run_until($w, "INSERT INTO warm (note, fencing_token) VALUES ('warm', $tok);\n" x 3
	  . "BEGIN;\nINSERT INTO warm (note, fencing_token) VALUES ('race', $tok);\nSELECT 'written';\n",
	qr/written/);
like($w->{out}, qr/written/, 'W wrote with the current token') or diag($w->{err});

# R: CLUSTER le_lease, held by gdb once it has committed and released its locks.
my $r = session();
run_until($r, "SELECT 'pid=' || pg_backend_pid();\n", qr/pid=\d+/);
my ($rpid) = $r->{out} =~ /pid=(\d+)/;
my $g = hold_in($rpid, 'smgrdounlinkall', $r, "CLUSTER le_lease USING le_lease_pkey;\nSELECT 'clustered';\n");
like($g->{out}, qr/Breakpoint 1,.*smgrdounlinkall/s, 'the CLUSTER stopped where it drops the old file')
  or diag($g->{out} . $g->{err});

# A: release and take over while the old file's buffers are still there
# (neither waits: the CLUSTER has released its locks).
is($node->safe_psql('postgres', "SELECT le_release('kw', 'A', $tok)"), 't', 'A released');
my $new = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('kw', 'B', '1 hour')");
ok($new > $tok, "B took the lease with token $new");

run_until($w, "COMMIT;\nSELECT 'done';\n", qr/done/);
like($w->{err}, qr/LE001: fencing token $tok of lease "kw" became stale before this transaction committed/,
	"W's COMMIT fails with LE001");

release_hold($g);
run_until($r, '', qr/clustered/);
like($r->{out}, qr/clustered/, 'the CLUSTER finished');
$_->{in} .= "\\q\n", $_->{h}->finish for ($w, $r);
is($node->safe_psql('postgres', "SELECT count(*) FROM warm WHERE note = 'race'"), '0',
	'no row written with the old token committed');

# Second race: TRUNCATE le_lease and a grant of the key in one
# transaction, held by gdb where it sends its invalidations (AtEOXact_Inval),
# after it is seen as committed and before it releases its locks.  The new
# row has a new lease id, so its fence lock is not the one the writer takes:
# the writer's COMMIT must wait for the TRUNCATE to end, then fail (LE001).
$node->safe_psql('postgres', 'VACUUM le_lease');
my $w2 = session();
run_until($w2, "INSERT INTO warm (note, fencing_token) VALUES ('warm', $new);\n" x 3
	  . "BEGIN;\nINSERT INTO warm (note, fencing_token) VALUES ('race2', $new);\nSELECT 'written2';\n",
	qr/written2/);
like($w2->{out}, qr/written2/, 'W2 wrote with the current token') or diag($w2->{err});
my $t = session();
run_until($t, "SELECT 'pid=' || pg_backend_pid();\nBEGIN;\nTRUNCATE le_lease, le_lease_history;\n"
	  . "SELECT 'granted=' || fencing_token FROM le_acquire('kw', 'C', '1 hour');\n"
	  . "SELECT 'xid=' || txid_current();\n", qr/xid=\d+/);
my ($tpid) = $t->{out} =~ /pid=(\d+)/;
my ($txid) = $t->{out} =~ /xid=(\d+)/;
my ($granted) = $t->{out} =~ /granted=(\d+)/;
ok($granted > $new, "C was granted token $granted after the TRUNCATE") or diag($t->{err});
$g = hold_in($tpid, 'AtEOXact_Inval', $t, "COMMIT;\nSELECT 'committed';\n");
like($g->{out}, qr/Breakpoint 1,.*AtEOXact_Inval/s, 'the TRUNCATE stopped before sending its invalidations')
  or diag($g->{out} . $g->{err});
is($node->safe_psql('postgres', "SELECT txid_status($txid)"), 'committed',
	"the TRUNCATE's and C's grant's transaction is seen as committed");

ok(!answers_within($w2, "COMMIT;\nSELECT 'done2';\n", qr/done2/, 2),
	"W2's COMMIT waits for the TRUNCATE's transaction to end");
release_hold($g);
run_until($w2, '', qr/done2/);
like($w2->{err}, qr/LE001: lease "kw" was replaced before this transaction committed/, "W2's COMMIT fails with LE001")
  or diag($w2->{err});
run_until($t, '', qr/committed/);
$_->{in} .= "\\q\n", $_->{h}->finish for ($w2, $t);
is($node->safe_psql('postgres', "SELECT count(*) FROM warm WHERE note = 'race2'"), '0',
	'no row written with the replaced lease committed');

# Third: a writer that passed its commit-time check and has not yet written
# its commit record (held by gdb in AfterTriggerEndXact, which runs after the
# commit callbacks) keeps le_lease from being truncated until its commit has
# ended, so that no TRUNCATE and new grant of the key can commit before it.
$node->safe_psql('postgres', 'VACUUM le_lease');
my $w3 = session();
run_until($w3, "INSERT INTO warm (note, fencing_token) VALUES ('warm', $granted);\n" x 3
	  . "BEGIN;\nINSERT INTO warm (note, fencing_token) VALUES ('race3', $granted);\n"
	  . "SELECT 'pid=' || pg_backend_pid();\n", qr/pid=\d+/);
my ($w3pid) = $w3->{out} =~ /pid=(\d+)/;
$g = hold_in($w3pid, 'AfterTriggerEndXact', $w3, "COMMIT;\nSELECT 'done3';\n");
like($g->{out}, qr/Breakpoint 1,.*AfterTriggerEndXact/s, "W3 stopped after its commit-time check")
  or diag($g->{out} . $g->{err});
my $t3 = session();
ok(!answers_within($t3, "BEGIN;\nTRUNCATE le_lease, le_lease_history;\nSELECT 'truncated';\n"
	  . "SELECT 'granted=' || fencing_token FROM le_acquire('kw', 'D', '1 hour');\nCOMMIT;\n", qr/truncated/, 2),
	"the TRUNCATE waits for W3's commit to end");
release_hold($g);
run_until($w3, '', qr/done3/);
unlike($w3->{err}, qr/ERROR/, "W3's COMMIT, judged before the TRUNCATE, succeeds") or diag($w3->{err});
run_until($t3, '', qr/granted=\d+/);
like($t3->{out}, qr/granted=\d+/, 'then D is granted the key') or diag($t3->{err});
$_->{in} .= "\\q\n", $_->{h}->finish for ($w3, $t3);

$node->stop;
done_testing();
