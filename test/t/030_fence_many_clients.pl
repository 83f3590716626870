# G5, many clients: several writers with possibly stale tokens
# and a client doing takeovers run at once; afterwards, using the commit
# timestamps of the rows and of the history, no protected row with token T
# committed after the transaction that ended T's period (a takeover's grant
# of a later token, or a release) had committed, and no row committed before
# its own token was granted.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use IPC::Run;

my $node = le_node('fence_many', conf => qq{
track_commit_timestamp = on
max_connections = 30
lock_timeout = 0
leader_election.lock_timeout = '20s'
});

$node->safe_psql('postgres', q{
CREATE TABLE ledger (id bigserial PRIMARY KEY, writer int NOT NULL,
                     fencing_token bigint NOT NULL);
SELECT le_protect('ledger', 'many');
CREATE TABLE rejected (writer int, fencing_token bigint, sqlstate text);
-- A write that reports a fence refusal instead of failing the transaction.
CREATE FUNCTION try_write(w int, tok bigint) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger (writer, fencing_token) VALUES (w, tok);
    RETURN true;
EXCEPTION WHEN SQLSTATE 'LE001' OR SQLSTATE 'LE002' THEN
    INSERT INTO rejected VALUES (w, tok, SQLSTATE);
    RETURN false;
END $$;
SELECT acquired FROM le_acquire('many', 'first', '10 minutes');
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my $secs = 8;
# Writers use the current token, or (one time in four) the previous one, and
# keep their transaction open a little before and after the write, so that
# takeovers happen between reading the token and writing, and between the
# write and the COMMIT.  Since the fence checks again at COMMIT,
# a COMMIT can fail with LE001/LE002; psql goes on after an error
# (pgbench would abort the client), and the script stops after $secs.
sub writer_script
{
	my ($writer, $deadline) = @_;
	my $script = "\\set VERBOSITY verbose\n";
	for (1 .. 4000)
	{
		$script .= "SELECT extract(epoch FROM clock_timestamp()) < $deadline AS go \\gset\n"
		  . "\\if :go\n"
		  . "BEGIN;\n"
		  . "SELECT GREATEST(1, fencing_token - CASE WHEN random() < 0.25 THEN 1 ELSE 0 END) AS tok"
		  . " FROM le_leases WHERE lease_key = 'many' \\gset\n"
		  . "SELECT pg_sleep(0.002);\n"
		  . "SELECT try_write($writer, :tok);\n"
		  . "SELECT pg_sleep(0.002);\n"
		  . "COMMIT;\n"
		  . "\\endif\n";
	}
	return $script;
}
my $deadline = $node->safe_psql('postgres', "SELECT extract(epoch FROM clock_timestamp()) + $secs");
my $fh;
# The taker: release by force, then grant a new token to itself.
open $fh, '>', "$dir/taker.sql" or die;
print $fh q{SELECT le_force_release('many');
SELECT pg_sleep(0.003);
SELECT acquired FROM le_acquire('many', 'taker', '10 minutes');
SELECT pg_sleep(0.02);
};
close $fh;

my $connstr = $node->connstr('postgres');
my ($tout, $terr) = ('', '');
my (@writers, @wout, @werr);
for my $w (1 .. 5)
{
	open $fh, '>', "$dir/writer$w.sql" or die;
	print $fh writer_script($w, $deadline);
	close $fh;
	($wout[$w], $werr[$w]) = ('', '');
	push @writers, IPC::Run::start(
		[ 'psql', '-XAtq', '-f', "$dir/writer$w.sql", '-d', $connstr ],
		'>', \$wout[$w], '2>', \$werr[$w]);
}
my $taker = IPC::Run::start(
    [ 'pgbench', '-n', '-c', '1', '-T', $secs, '-f', "$dir/taker.sql", $connstr ],
    '>', \$tout, '2>', \$terr);
$_->finish for @writers;
ok($taker->finish, 'taker ran without errors') or diag($terr);
unlike($terr, qr/aborted|error/i, 'the taker was not aborted');
my $werr = join('', map { $werr[$_] } 1 .. 5);
my @errors = grep { /ERROR:/ } split /\n/, $werr;
my @other = grep { !/ERROR:  LE00[12]:/ } @errors;
is(scalar(@other), 0, 'writers got no errors but the fence\'s (LE001, LE002)') or diag(join("\n", @other));
my $commit_rejected = grep { /before this transaction committed/ } @errors;
note "COMMITs refused by the commit-time check: $commit_rejected";
my ($accepted, $rejected, $grants) = split /\|/, $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM rejected),
       (SELECT count(*) FROM le_lease_history WHERE lease_key = 'many')});
note "accepted rows: $accepted, rejected writes: $rejected, ownership periods: $grants";
cmp_ok($accepted, '>', 50, 'many writes were accepted');
cmp_ok($rejected, '>', 5, 'stale writes were rejected');
cmp_ok($grants, '>', 10, 'many takeovers happened');

# Every accepted row committed inside its token's period, by commit order.
my $late = $node->safe_psql('postgres', q{
SELECT count(*) FROM ledger AS l
  JOIN le_lease_history AS h ON h.lease_key = 'many' AND h.fencing_token = l.fencing_token
 WHERE h.ended_at IS NOT NULL
   AND pg_xact_commit_timestamp(l.xmin) > pg_xact_commit_timestamp(h.xmin)});
is($late, '0', 'no row committed after its token was superseded or released');

my $early = $node->safe_psql('postgres', q{
SELECT count(*) FROM ledger AS l
 WHERE NOT EXISTS (SELECT FROM le_lease_history AS h
                    WHERE h.lease_key = 'many' AND h.fencing_token = l.fencing_token)});
is($early, '0', 'every row carries a token that was granted');

# The check above would see a violation: rows committed after their period
# ended are counted (a self-test of the query on a deliberately late row,
# written with the fence disabled).
$node->safe_psql('postgres', q{
SET session_replication_role = replica;
INSERT INTO ledger (writer, fencing_token)
SELECT -1, min(fencing_token) FROM le_lease_history WHERE lease_key = 'many';
});
$late = $node->safe_psql('postgres', q{
SELECT count(*) FROM ledger AS l
  JOIN le_lease_history AS h ON h.lease_key = 'many' AND h.fencing_token = l.fencing_token
 WHERE h.ended_at IS NOT NULL
   AND pg_xact_commit_timestamp(l.xmin) > pg_xact_commit_timestamp(h.xmin)});
is($late, '1', 'the check detects a row written with a stale token behind the fence\'s back');

$node->stop;
done_testing();
