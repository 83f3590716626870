# G5 and the fence's commit-time shortcut (src/lease_rows.c,
# le_rows_row_unchanged): at COMMIT, once the fence lock is granted, the
# fence trusts the row version its write read when that version's page still
# has the LSN it had then.  With wal_level = minimal a relation whose file was
# created in the same transaction is changed without WAL, so its pages keep
# their LSN: ALTER TABLE le_lease SET TABLESPACE copies every page, LSNs
# included, into a new file, and a takeover in that transaction rewrites the
# lease row without moving the LSN.  A writer
# that wrote with the old token before the takeover must still fail at
# COMMIT (LE001), and none of its rows may commit.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;

my $node = le_node('wal_minimal', conf => qq{
wal_level = minimal
max_wal_senders = 0
});
my $ts = PostgreSQL::Test::Utils::tempdir();
$node->safe_psql('postgres', qq{
CREATE TABLESPACE moved LOCATION '$ts';
CREATE TABLE data (id int, fencing_token bigint NOT NULL);
SELECT le_protect('data', 'k');
});
my $tok = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('k', 'alice', '1 hour')");

# A: a check in autocommit first (so that the session reads the lease row on
# its page from then on, as a long-lived session does), then a fenced write
# in an open transaction.
my ($in, $out, $err) = ('', '', '');
my $timer = IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default);
my $a = IPC::Run::start(
	[ 'psql', '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $node->connstr('postgres') ],
	'<', \$in, '>', \$out, '2>', \$err, $timer);
$in .= "SELECT le_fence_check('k', $tok);\nBEGIN;\nINSERT INTO data VALUES (1, $tok);\nSELECT 'written';\n";
$a->pump until $out =~ /written/ || $err =~ /ERROR/ || $timer->is_expired;
like($out, qr/written/, 'A wrote with the current token') or diag($err);

# B: moves le_lease to another file without WAL and takes the lease over in
# the same transaction.
my $new = $node->safe_psql('postgres', q{
BEGIN;
SET LOCAL wal_skip_threshold = 0;
ALTER TABLE le_lease SET TABLESPACE moved;
SELECT le_force_release('k') AS released \gset
SELECT fencing_token FROM le_acquire('k', 'bob', '1 hour') \gset
COMMIT;
SELECT fencing_token FROM le_leases WHERE lease_key = 'k' AND holder = 'bob';
});
ok($new > $tok, "bob took the lease over with token $new");

$in .= "COMMIT;\nSELECT 'done';\n";
$a->pump until $out =~ /done/ || $timer->is_expired;
$in .= "\\q\n";
$a->finish;
like($err, qr/LE001: fencing token $tok of lease "k" became stale before this transaction committed/,
	"A's COMMIT fails with LE001");
is($node->safe_psql('postgres', 'SELECT count(*) FROM data'), '0', 'no row written with the old token committed');

$node->stop;
done_testing();
