# G3: fencing tokens never repeat across a clean restart,
# `pg_ctl stop -m immediate` and kill -9 of the postmaster right after an
# acknowledged acquire; an acknowledged grant and an acknowledged renewal
# survive the crash even when the caller runs with synchronous_commit = off
# (per session, and in postgresql.conf).
#
# The WAL writer is slowed down (wal_writer_delay = 10s, no checkpoints,
# no background writer, no autovacuum) so that an asynchronously committed
# grant or renewal is still only in memory when the server dies: without
# the ForceSyncCommit() calls in le_acquire and le_renew this test fails.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;
use Time::HiRes qw(usleep);

my $node = le_node('crash', conf => q{
wal_writer_delay = 10s
wal_writer_flush_after = 1GB
checkpoint_timeout = 1h
max_wal_size = 1GB
bgwriter_lru_maxpages = 0
autovacuum = off
});

# Every token acknowledged so far, for the "never repeats" check.
my @acknowledged;
my $max_token = 0;

# Pids of the postmaster's children (Linux /proc), to wait for after kill -9.
sub children_of
{
	my ($ppid) = @_;
	my @kids;
	opendir(my $dh, '/proc') or die "cannot read /proc: $!";
	for my $pid (grep { /^\d+$/ } readdir $dh)
	{
		open(my $fh, '<', "/proc/$pid/stat") or next;
		my $stat = <$fh>;
		close $fh;
		# pid (comm) state ppid ...; comm may contain spaces.
		push @kids, $pid if $stat =~ /\)\s+\S+\s+(\d+)/ && $1 == $ppid;
	}
	closedir $dh;
	return @kids;
}

# Is the process gone?  A zombie still counts: until its parent reaps it,
# kill(pid, 0) succeeds and a new postmaster thinks the old one is alive.
sub process_gone
{
	my ($pid) = @_;
	return !-e "/proc/$pid";
}

# Bring the server down one way or another, then start it again.
sub crash_and_restart
{
	my ($mode) = @_;

	if ($mode eq 'clean')
	{
		$node->restart;
	}
	elsif ($mode eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
	}
	elsif ($mode eq 'kill9')
	{
		# The postmaster pid as the server itself recorded it.
		my $pid = $node->safe_psql('postgres',
			"SELECT split_part(pg_read_file('postmaster.pid'), E'\\n', 1)");
		die "postmaster.pid says $pid, node says $node->{_pid}"
		  unless $pid == $node->{_pid};
		my @kids = children_of($pid);
		kill 'KILL', $pid or die "kill -9 $pid: $!";
		# The node object must forget the postmaster we killed ourselves.
		$node->{_pid} = undef;

		# A new postmaster refuses to start while old children still hold the
		# shared memory; they exit when they notice the postmaster died.
		my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
		while (grep { !process_gone($_) } ($pid, @kids))
		{
			die "children of killed postmaster $pid did not exit" if time > $deadline;
			usleep(50_000);
		}
		note "kill -9 of postmaster $pid; waited for "
		  . scalar(@kids) . " children to exit";
		$node->start;
	}
	else
	{
		die "unknown mode $mode";
	}
}

# Run one call in a fresh session with the given session settings; returns
# its output (the acknowledgement the client saw).
sub call
{
	my ($settings, $sql) = @_;
	return $node->safe_psql('postgres', "$settings\n$sql");
}

# The lease row after recovery: holder|token|expiry as epoch.
sub lease_state
{
	my ($key) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(holder, '<free>') || '|' || fencing_token || '|' ||"
		  . " coalesce(extract(epoch FROM expires_at)::text, '<none>')"
		  . " FROM le_leases WHERE lease_key = '$key'");
}

my @modes = qw(clean immediate kill9 immediate kill9);
my $key = 'crash';
my ($owner, $token);

for my $variant ('session', 'postgresql.conf')
{
	my $settings = '';
	if ($variant eq 'session')
	{
		$settings = 'SET synchronous_commit = off;';
	}
	else
	{
		$node->append_conf('postgresql.conf', 'synchronous_commit = off');
		$node->reload;
	}
	my $effective = call($settings, 'SHOW synchronous_commit');
	is($effective, 'off', "[$variant] callers run with synchronous_commit = off");

	my $pass = 0;

	for my $mode (@modes)
	{
		$pass++;
		my $prefix = "[$variant, pass $pass, $mode]";

		# A new ownership period: release the previous one (if any), then
		# acquire as a new owner; the acquire is the last acknowledged call.
		is(call($settings, "SELECT le_release('$key', '$owner', $token)"),
			't', "$prefix previous owner $owner released token $token")
		  if defined $owner;
		$owner = "owner-$variant-$pass";
		my $reply = call($settings,
			"SELECT acquired || '|' || fencing_token || '|' || extract(epoch FROM expires_at)"
			  . " FROM le_acquire('$key', '$owner', '10 minutes')");
		my ($acquired, $new_token, $expiry) = split /\|/, $reply;
		is($acquired, 'true', "$prefix acquire granted");
		cmp_ok($new_token, '>', $max_token,
			"$prefix token $new_token is above every token acknowledged before ($max_token)");
		$token = $new_token;
		push @acknowledged, $token;
		$max_token = $token;

		note "$prefix injected: $mode right after the acknowledged grant of token $token to $owner";
		crash_and_restart($mode);
		my $state = lease_state($key);
		note "$prefix checked: after recovery the lease row is $state";
		is($state, "$owner|$token|$expiry",
			"$prefix the acknowledged grant survived: holder, token and expiry");
		my $refused = $node->safe_psql('postgres',
			"SELECT acquired FROM le_acquire('$key', 'intruder', '1 minute')");
		is($refused, 'f', "$prefix another owner is still refused");

		# The renewal is now the last acknowledged call.
		my $renewed = call($settings,
			"SELECT extract(epoch FROM le_renew('$key', '$owner', $token, '20 minutes'))");
		cmp_ok($renewed, '>', $expiry, "$prefix renewal acknowledged with a later expiry");
		note "$prefix injected: $mode right after the acknowledged renewal of token $token (expiry $renewed)";
		crash_and_restart($mode);
		$state = lease_state($key);
		note "$prefix checked: after recovery the lease row is $state";
		is($state, "$owner|$token|$renewed",
			"$prefix the acknowledged renewal survived with its expiry");
	}

	# After the last crash, the next owner gets a higher token still.
	is(call($settings, "SELECT le_release('$key', '$owner', $token)"),
		't', "[$variant] last owner released");
	my $next = call($settings, "SELECT fencing_token FROM le_acquire('$key', 'next', '1 minute')");
	cmp_ok($next, '>', $max_token, "[$variant] next grant after the crashes gets token $next > $max_token");
	push @acknowledged, $next;
	($owner, $token, $max_token) = ('next', $next, $next);

	# History has one row per grant, tokens in order and without repeats.
	my $history = $node->safe_psql('postgres',
		"SELECT string_agg(fencing_token::text, ',' ORDER BY history_id)"
		  . " FROM le_lease_history WHERE lease_key = '$key'");
	is($history, join(',', @acknowledged),
		"[$variant] history lists every acknowledged grant once, in order");
}

my %seen;
my @repeats = grep { $seen{$_}++ } @acknowledged;
is(scalar(@repeats), 0, 'no token was ever acknowledged twice: ' . join(',', @acknowledged));

$node->stop;
done_testing();
