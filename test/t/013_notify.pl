# G11, notifications of lease changes: a session listening on channel
# leader_election receives exactly one notification per grant (event
# "acquired") and per release ("released", "force_released"), delivered at
# commit (with leader_election.notify = all; the default, releases, leaves
# grants out), whose payload is valid JSON with event, lease_key, holder,
# fencing_token, expires_at and (1.1) metadata, with quotes, backslashes, control characters
# and non-ASCII text in the key and owner escaped correctly; renewals,
# repeated acquires by the holder, refusals and rolled-back acquires send
# none.  leader_election.notify = releases leaves grants out, none everything.
# Only leases that another session watches (le_watch) are announced.
use strict;
use warnings;
use utf8;

use Encode qw(encode_utf8);
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('notify', init => { extra => [ '--encoding=UTF8', '--locale=C' ] });

# The default is releases; grants are announced with all, set for this test.
is($node->safe_psql('postgres',
		"LOAD 'leader_election'; SELECT boot_val FROM pg_settings WHERE name = 'leader_election.notify'"),
	'releases', 'leader_election.notify is releases by default');
$node->append_conf('postgresql.conf', 'leader_election.notify = all');
$node->reload;

# Run SQL (a perl character string) in a fresh session.
sub sql
{
	my ($query) = @_;
	return $node->safe_psql('postgres', encode_utf8($query));
}

my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN leader_election; LISTEN le_test_sentinel');
# Changes notify only while another session watches the lease (le_watch).
$listener->query_safe(q{SELECT le_watch('k'), le_watch('m1'), le_watch('m2'), le_watch('r')});
my $json = JSON::PP->new->utf8;
my $sentinel = 0;

# Everything the listener received on leader_election since the last call,
# as decoded payloads.  A sentinel NOTIFY sent after the actions arrives after
# every notification committed before it, so nothing can still be in flight.
sub received
{
	my $mark = ++$sentinel;
	$node->safe_psql('postgres', "NOTIFY le_test_sentinel, '$mark'");
	my (@payloads, $done);
	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	until ($done)
	{
		die 'sentinel notification never arrived' if time > $deadline;
		my $out = $listener->query_safe('SELECT 1');
		for my $line (split /\n/, $out)
		{
			next unless $line =~
			  /^Asynchronous notification "([^"]+)" with payload "(.*)" received from server process with PID \d+\.$/;
			my ($channel, $payload) = ($1, $2);
			if ($channel eq 'le_test_sentinel')
			{
				$done = 1 if $payload eq $mark;
				next;
			}
			my $decoded = eval { $json->decode($payload) };
			ok(defined $decoded, "payload is valid JSON: $payload") or diag $@;
			push @payloads, $decoded if defined $decoded;
		}
	}
	return @payloads;
}

# The lease as le_leases reports it: holder, token, expiry as ISO text.
sub lease_now
{
	my ($key) = @_;
	my $row = $node->safe_psql('postgres', encode_utf8(
		"SELECT fencing_token, to_json(expires_at)#>>'{}' FROM le_leases WHERE lease_key = \$k\$$key\$k\$"));
	return split /\|/, $row;
}

# Check one step: what it did, and the notifications it must have produced.
sub step_sends
{
	my ($what, @expected) = @_;
	my @got = received();
	note "injected: $what; checked: received "
	  . scalar(@got) . ' notification(s): '
	  . join(' ', map { JSON::PP->new->canonical->encode($_) } @got);
	is(scalar(@got), scalar(@expected), "$what: " . scalar(@expected) . ' notification(s)');
	for my $i (0 .. $#expected)
	{
		# every payload ends with the lease's metadata (1.1); none is set here
		is_deeply($got[$i], { metadata => undef, %{ $expected[$i] } },
			"$what: notification " . ($i + 1) . ' has the expected payload');
	}
}

# A grant: one "acquired" with holder, token and the expiry le_leases shows.
my $t = sql("SELECT fencing_token FROM le_acquire('k', 'A', '1 minute')");
my (undef, $exp) = lease_now('k');
like($exp, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)$/, 'expires_at is ISO 8601');
step_sends('grant of k to A',
	{ event => 'acquired', lease_key => 'k', holder => 'A', fencing_token => $t, expires_at => $exp });

# The holder again, a renewal, a refusal: none.
sql("SELECT le_acquire('k', 'A', '2 minutes')");
sql("SELECT le_renew('k', 'A', $t, '3 minutes')");
is(sql("SELECT acquired FROM le_acquire('k', 'B', '1 minute')"), 'f', 'B is refused');
sql("SELECT le_renew('k', 'B', $t, '3 minutes')");
sql("SELECT le_release('k', 'B', $t)");
step_sends('repeated acquire by the holder, renewal, refused acquire, refused renew and release');

# A release: holder and expiry are null, the token is the released one.
sql("SELECT le_release('k', 'A', $t)");
step_sends('release of k by A',
	{ event => 'released', lease_key => 'k', holder => undef, fencing_token => $t, expires_at => undef });

# A rolled-back grant sends none.
my $t_rb = sql("BEGIN; SELECT fencing_token FROM le_acquire('k', 'C', '1 minute'); ROLLBACK;");
step_sends('acquire rolled back');

# A grant inside an open transaction is announced only at its commit.
my $tx = $node->background_psql('postgres');
# (ttl 2 s: a grant in a transaction block bounds that transaction's idle
# time by its ttl, so a shorter one could end the session on a loaded machine
# before the COMMIT below.)
$tx->query_safe("BEGIN; SELECT le_acquire('k', 'D', '2 seconds')");
step_sends('acquire in a transaction not yet committed');
$tx->query_safe('COMMIT');
$tx->quit;
my ($t_d, $exp_d) = lease_now('k');
cmp_ok($t_d, '>', $t_rb, 'the token of the rolled-back grant is not issued again');
step_sends('commit of that transaction',
	{ event => 'acquired', lease_key => 'k', holder => 'D', fencing_token => $t_d, expires_at => $exp_d });

# Takeover of an expired lease: one "acquired", no separate event for expiry.
$node->poll_query_until('postgres', "SELECT NOT is_valid FROM le_leases WHERE lease_key = 'k'")
  or die 'lease k did not expire';
my $t_e = sql("SELECT fencing_token FROM le_acquire('k', 'E', '1 minute')");
my (undef, $exp_e) = lease_now('k');
step_sends('takeover of the expired lease by E',
	{ event => 'acquired', lease_key => 'k', holder => 'E', fencing_token => $t_e, expires_at => $exp_e });

# Force release.
sql("SELECT le_force_release('k')");
sql("SELECT le_force_release('k')");
step_sends('force release of k (twice; the second finds it free)',
	{ event => 'force_released', lease_key => 'k', holder => undef, fencing_token => $t_e, expires_at => undef });

# Escaping: quotes, backslashes, control characters and non-ASCII text.
my $key = qq{quote" back\\slash \\"x\\u0041 ключ ✓ 🔒};
my $owner = qq{own"er\\ tab\there\nnewline \x01 é};
$listener->query_safe(encode_utf8("SELECT le_watch(\$k\$$key\$k\$)"));
my $t_w = sql("SELECT fencing_token FROM le_acquire(\$k\$$key\$k\$, \$o\$$owner\$o\$, '1 minute')");
my (undef, $exp_w) = lease_now($key);
step_sends('grant of a lease whose key and owner need escaping',
	{ event => 'acquired', lease_key => $key, holder => $owner, fencing_token => $t_w, expires_at => $exp_w });
sql("SELECT le_release(\$k\$$key\$k\$, \$o\$$owner\$o\$, $t_w)");
step_sends('release of that lease',
	{ event => 'released', lease_key => $key, holder => undef, fencing_token => $t_w, expires_at => undef });

# Several grants and releases in one transaction: one notification each.
my ($m1, $m2) = split /\n/, sql(q{BEGIN;
SELECT fencing_token FROM le_acquire('m1', 'M', '1 minute');
SELECT fencing_token FROM le_acquire('m2', 'M', '1 minute');
SELECT le_release('m1', 'M', fencing_token) FROM le_lease WHERE lease_key = 'm1';
COMMIT;});
my @m = received();
is_deeply([ map { "$_->{event} $_->{lease_key} $_->{fencing_token}" } @m ],
	[ "acquired m1 $m1", "acquired m2 $m2", "released m1 $m1" ],
	'one notification per grant and release of a transaction, in order');

# leader_election.notify = releases: grants commit without a notification
# (no queue lock), releases and force releases are still announced, so
# followers still learn of a free lease at once; none: nothing at all.
my $rk = sql(q{SET leader_election.notify = releases;
SELECT fencing_token FROM le_acquire('r', 'R', '1 minute');});
step_sends('grant with leader_election.notify = releases');
sql("SET leader_election.notify = releases; SELECT le_release('r', 'R', $rk)");
step_sends('release with leader_election.notify = releases',
	{ event => 'released', lease_key => 'r', holder => undef, fencing_token => $rk, expires_at => undef });
$rk = sql(q{SET leader_election.notify = releases;
SELECT fencing_token FROM le_acquire('r', 'R', '1 minute');});
sql("SET leader_election.notify = releases; SELECT le_force_release('r')");
step_sends('force release with leader_election.notify = releases',
	{ event => 'force_released', lease_key => 'r', holder => undef, fencing_token => $rk, expires_at => undef });
$rk = sql(q{SET leader_election.notify = none;
SELECT fencing_token FROM le_acquire('r', 'R', '1 minute');});
sql("SET leader_election.notify = none; SELECT le_release('r', 'R', $rk)");
step_sends('grant and release with leader_election.notify = none');
# Nobody watches lease u: its grant and release send nothing (no queue lock
# at their commits), even with leader_election.notify = all; nor do they
# when the only watcher is the session that changes the lease.  Once the
# listener watches, they are announced; after le_unwatch, and after its
# session ended, nothing again.
my $u = sql("SELECT fencing_token FROM le_acquire('u', 'U', '1 minute')");
sql("SELECT le_release('u', 'U', $u)");
step_sends('grant and release of a lease nobody watches');
$u = sql(q{SELECT le_watch('u'); SELECT fencing_token FROM le_acquire('u', 'U', '1 minute')});
$u = (split /\n/, $u)[-1];
sql("SELECT le_watch('u'); SELECT le_release('u', 'U', $u)");
step_sends('grant and release by sessions that watch it themselves');
is($listener->query_safe(q{SELECT le_watch('u')}), 't', 'le_watch: true when the session starts watching');
is($listener->query_safe(q{SELECT le_watch('u')}), 'f', 'le_watch again: false');
$u = sql("SELECT fencing_token FROM le_acquire('u', 'U', '1 minute')");
my (undef, $exp_u) = lease_now('u');
sql("SELECT le_release('u', 'U', $u)");
step_sends('grant and release of u while the listener watches',
	{ event => 'acquired', lease_key => 'u', holder => 'U', fencing_token => $u, expires_at => $exp_u },
	{ event => 'released', lease_key => 'u', holder => undef, fencing_token => $u, expires_at => undef });
is($listener->query_safe(q{SELECT le_unwatch('u')}), 't', 'le_unwatch: true when the session watched');
is($listener->query_safe(q{SELECT le_unwatch('u')}), 'f', 'le_unwatch again: false');
$u = sql("SELECT fencing_token FROM le_acquire('u', 'U', '1 minute')");
sql("SELECT le_release('u', 'U', $u)");
step_sends('grant and release of u after le_unwatch');
my $other = $node->background_psql('postgres');
$other->query_safe(q{SELECT le_watch('u')});
$other->quit;
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM pg_locks WHERE locktype = 'advisory'
  AND objsubid = 19525 AND mode = 'AccessShareLock' AND objid = (SELECT lease_id FROM le_lease WHERE lease_key = 'u')})
  or die 'the watcher\'s session did not end';
$u = sql("SELECT fencing_token FROM le_acquire('u', 'U', '1 minute')");
sql("SELECT le_release('u', 'U', $u)");
step_sends('grant and release of u after its watcher\'s session ended');

my ($ok, $out, $err) = $node->psql('postgres', "LOAD 'leader_election'; SET leader_election.notify = sometimes");
like($err, qr/invalid value for parameter "leader_election.notify"/, 'an unknown leader_election.notify value is refused');

$listener->quit;
$node->stop;
done_testing();
