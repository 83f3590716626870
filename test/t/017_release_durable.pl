# G3 and G4: an acknowledged le_release or le_force_release survives
# an immediate stop right after it, even with synchronous_commit = off and a
# slow WAL writer: after recovery the lease is free, its history row is
# ended with the right reason, and a write with the old token is rejected
# by the fence.  Nothing else is called between the release and the stop
# (a later grant's commit flush would hide a lost release), so without the
# ForceSyncCommit() of the release path this test fails.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('reldurable', conf => q{
wal_writer_delay = 10s
wal_writer_flush_after = 1GB
checkpoint_timeout = 1h
max_wal_size = 1GB
bgwriter_lru_maxpages = 0
autovacuum = off
synchronous_commit = off
});

for my $how ('le_release', 'le_force_release')
{
	my $owner = "owner-$how";
	my $key = "rel-$how";
	my $table = "guarded_$how";
	$node->safe_psql('postgres',
		"CREATE TABLE $table (v int, fencing_token bigint); SELECT le_protect('$table', '$key')");
	my $token = $node->safe_psql('postgres',
		"SELECT fencing_token FROM le_acquire('$key', '$owner', '10 minutes')");
	$node->safe_psql('postgres', "INSERT INTO $table VALUES (1, $token)");

	# Flush everything so far, then nothing but the release is unflushed.
	$node->safe_psql('postgres', 'CHECKPOINT');
	my $call = $how eq 'le_release'
	  ? "SELECT le_release('$key', '$owner', $token)"
	  : "SELECT le_force_release('$key')";
	is($node->safe_psql('postgres', "SHOW synchronous_commit; $call"),
		"off\nt", "[$how] release of token $token acknowledged with synchronous_commit = off");
	$node->stop('immediate');
	$node->start;

	is($node->safe_psql('postgres',
			"SELECT coalesce(holder, '<free>') || ' ' || is_valid FROM le_leases WHERE lease_key = '$key'"),
		'<free> false', "[$how] after recovery the lease is free");
	my $reason = $how eq 'le_release' ? 'released' : 'force_released';
	is($node->safe_psql('postgres',
			"SELECT end_reason FROM le_lease_history WHERE lease_key = '$key' AND fencing_token = $token"),
		$reason, "[$how] its history row is ended as $reason");
	my ($rc, $out, $err) = $node->psql('postgres',
		"INSERT INTO $table VALUES (2, $token)",
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ]);
	like($err, qr/LE00[12]/, "[$how] a write with the old token $token is rejected by the fence");
	is($node->safe_psql('postgres', "SELECT count(*) FROM $table WHERE v = 2"),
		'0', "[$how] and nothing of it is stored");
}

$node->stop;
done_testing();
