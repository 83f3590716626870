# G7 (no call waits without bound), across a server restart:
# a PREPARE TRANSACTION that holds lease rows (a superuser's SELECT ... FOR
# UPDATE of le_lease: the API itself refuses to prepare a lease change or a
# fenced transaction, 0A000, checked first) survives a clean restart and a
# crash (`pg_ctl stop -m immediate`); afterwards le_acquire, le_renew and
# le_release blocked by it fail with SQLSTATE 55P03 after about
# leader_election.lock_timeout instead of hanging, a refusal of a validly
# held lease and a failed renew are answered at once, and COMMIT PREPARED /
# ROLLBACK PREPARED free the leases again.  (The isolation spec lease_stuck
# covers the same without a restart.)
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

# The bound under test, and what "a few times" it may take on a loaded machine.
my $lock_timeout_s = 1;
my $max_wait_s = 10 * $lock_timeout_s;

my $node = le_node('stuck', conf => qq{
max_prepared_transactions = 5
leader_election.lock_timeout = ${lock_timeout_s}s
});
$node->safe_psql('postgres', q{
-- Run one call; report its SQLSTATE (or ok), the error context and the
-- seconds it took, measured by the server clock.
CREATE FUNCTION try_call(query text, OUT state text, OUT context text, OUT waited numeric)
LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    EXECUTE query;
    state := 'ok';
    waited := round(extract(epoch FROM clock_timestamp() - t0), 3);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, context = PG_EXCEPTION_CONTEXT;
    waited := round(extract(epoch FROM clock_timestamp() - t0), 3);
END $$;
});

# 'valid': held by a for 30 minutes; 'lapsed': a's lease has expired.
my $valid = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('valid', 'a', '30 minutes')");
my $lapsed = $node->safe_psql('postgres',
	"SELECT fencing_token FROM le_acquire('lapsed', 'a', '100 milliseconds')");
$node->poll_query_until('postgres', "SELECT NOT is_valid FROM le_leases WHERE lease_key = 'lapsed'")
  or die 'lease lapsed did not expire';

# The API refuses to prepare what would hold a lease row or fence lock: a
# renewal (grants and releases, and calls that locked a lease to change it,
# are refused the same way) and a transaction that passed the fence.  Nothing is prepared, nothing
# applied.
my $fenced = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('fenced', 'f', '30 minutes')");
for my $case (
	[ 'a renewal', "SELECT le_renew('valid', 'a', $valid, '50 minutes')", 'changed or locked a lease' ],
	[ 'a fenced transaction', "SELECT le_fence_check('fenced', $fenced)", 'passed the fence of lease "fenced"' ])
{
	my ($what, $sql, $msg) = @$case;
	my ($ret, $out, $err) = $node->psql('postgres',
		"\\set VERBOSITY verbose\nBEGIN;\n$sql;\nPREPARE TRANSACTION 'refused';");
	like($err, qr/0A000: cannot PREPARE a transaction that \Q$msg\E/, "PREPARE of $what is refused with 0A000");
	like($err, qr/HINT:  .*without two-phase commit/, "the refusal of $what hints at committing without two-phase commit");
}
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0', 'no refused transaction was prepared');
is($node->safe_psql('postgres',
		"SELECT expires_at < clock_timestamp() + interval '40 minutes' FROM le_leases WHERE lease_key = 'valid'"),
	't', 'the refused renewal (50 minutes) was not applied');
is($node->safe_psql('postgres', "SELECT le_release('fenced', 'f', $fenced)"),
	't', 'the refused fenced transaction left no fence lock behind: the release works at once');

# Two prepared transactions that hold the rows (superuser row locks): the
# valid lease's and the lapsed lease's.
$node->safe_psql('postgres',
	"BEGIN; SELECT 1 FROM le_lease WHERE lease_key = 'valid' FOR UPDATE; PREPARE TRANSACTION 'stuck_valid';");
$node->safe_psql('postgres',
	"BEGIN; SELECT 1 FROM le_lease WHERE lease_key = 'lapsed' FOR UPDATE; PREPARE TRANSACTION 'stuck_lapsed';");

my %calls = (
	'acquire of the lapsed lease' => "SELECT le_acquire('lapsed', 'b', '1 minute')",
	'renew of the valid lease' => "SELECT le_renew('valid', 'a', $valid)",
	'release of the valid lease' => "SELECT le_release('valid', 'a', $valid)",
	'force release of the valid lease' => "SELECT le_force_release('valid')",);

for my $restart ('clean restart', 'crash (pg_ctl stop -m immediate)')
{
	if ($restart eq 'clean restart')
	{
		$node->restart;
	}
	else
	{
		$node->stop('immediate');
		$node->start;
	}
	note "injected: $restart with two prepared transactions holding lease rows";
	is($node->safe_psql('postgres', 'SELECT string_agg(gid, \',\' ORDER BY gid) FROM pg_prepared_xacts'),
		'stuck_lapsed,stuck_valid', "[$restart] the prepared transactions survived");

	for my $what (sort keys %calls)
	{
		my $sql = $calls{$what};
		$sql =~ s/'/''/g;
		my ($state, $context, $waited) = split /\|/,
		  $node->safe_psql('postgres', "SELECT * FROM try_call('$sql')");
		note "checked: $what -> SQLSTATE $state after ${waited}s";
		is($state, '55P03', "[$restart] $what fails with 55P03");
		cmp_ok($waited, '>=', $lock_timeout_s * 0.9, "[$restart] $what waited for the lock timeout (${waited}s)");
		cmp_ok($waited, '<', $max_wait_s, "[$restart] $what gave up within ${max_wait_s}s");
		like($context, qr/lock waits are bounded by leader_election.lock_timeout = 1000 ms/,
			"[$restart] $what: the error says which lease and which setting bounded the wait");
	}

	# A refusal of the validly held lease only reads: no wait at all.
	my ($state, undef, $waited) = split /\|/, $node->safe_psql('postgres',
		"SELECT * FROM try_call(\$\$SELECT le_acquire('valid', 'b', '1 minute')\$\$)");
	is($state, 'ok', "[$restart] a competitor for the valid lease is answered");
	cmp_ok($waited, '<', $lock_timeout_s * 0.9, "[$restart] and answered without waiting (${waited}s)");
	is($node->safe_psql('postgres', "SELECT acquired FROM le_acquire('valid', 'b', '1 minute')"),
		'f', "[$restart] the answer is a refusal");

	# A failed renew (the lapsed lease) is decided without the row lock.
	($state, undef, $waited) = split /\|/, $node->safe_psql('postgres',
		"SELECT * FROM try_call(\$\$SELECT le_renew('lapsed', 'a', $lapsed)\$\$)");
	is($state, 'ok', "[$restart] a renew of the lapsed lease is answered");
	cmp_ok($waited, '<', $lock_timeout_s * 0.9, "[$restart] without waiting (${waited}s)");
}

# Resolving the prepared transactions frees the leases.
$node->safe_psql('postgres', "ROLLBACK PREPARED 'stuck_lapsed'");
my ($b_acq, $b_tok) = split / /, $node->safe_psql('postgres',
	"SELECT acquired || ' ' || fencing_token FROM le_acquire('lapsed', 'b', '1 minute')");
ok($b_acq eq 'true' && $b_tok > $lapsed,
	"after ROLLBACK PREPARED the lapsed lease goes to b with a higher token ($b_tok > $lapsed)");
$node->safe_psql('postgres', "COMMIT PREPARED 'stuck_valid'");
is($node->safe_psql('postgres', "SELECT le_renew('valid', 'a', $valid, '1 minute') IS NOT NULL"),
	't', 'after COMMIT PREPARED of the row lock the holder renews again');
is($node->safe_psql('postgres', "SELECT le_release('valid', 'a', $valid)"),
	't', 'and releases');

$node->stop;
done_testing();
