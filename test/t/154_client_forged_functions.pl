# pg_leader calls no function that is not the extension's when it
# connects again.  A role with CREATE on the extension's schema may, after
# a DROP EXTENSION, create functions of the same names there (or the
# extension may come back in another schema, look-alikes left in the
# first).  Every new connection of pg_leader (campaign, renewal, group
# heartbeat) looks the extension up again, in the schema found first, and
# refuses to go on: a follower or group member exits 78, a leader's period
# ends.  No look-alike is called (each records its calls in table pwned),
# no command starts on a forged grant.  pg_leader runs with default signal
# dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use LeNode;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_forged');
$node->safe_psql('postgres', q{
	CREATE ROLE mallory LOGIN;
	GRANT CREATE ON SCHEMA public TO mallory;
	CREATE SCHEMA s1;
	GRANT CREATE, USAGE ON SCHEMA s1 TO mallory;
	CREATE TABLE pwned (fn text, who text);
	GRANT INSERT ON pwned TO mallory;
});

# Look-alikes, created by mallory in schema $s, that record every call.
sub forge_sql
{
	my ($s) = @_;
	return qq{
	SET ROLE mallory;
	CREATE FUNCTION $s.le_acquire(lease_key text, owner_id text, ttl interval, OUT acquired boolean,
		OUT fencing_token bigint, OUT holder text, OUT expires_at timestamptz, OUT new_period boolean)
	LANGUAGE sql AS \$\$ INSERT INTO public.pwned SELECT 'le_acquire', current_user;
		SELECT true, 424242::bigint, owner_id, pg_catalog.now() + ttl, true \$\$;
	CREATE FUNCTION $s.le_renew(text, text, bigint, interval) RETURNS timestamptz
	LANGUAGE sql AS \$\$ INSERT INTO public.pwned SELECT 'le_renew', current_user;
		SELECT pg_catalog.now() + \$4 \$\$;
	CREATE FUNCTION $s.le_release(text, text, bigint) RETURNS boolean
	LANGUAGE sql AS \$\$ INSERT INTO public.pwned SELECT 'le_release', current_user; SELECT true \$\$;
	CREATE FUNCTION $s.le_group_heartbeat(text, text, interval)
	RETURNS TABLE(partition integer, lease_key text, fencing_token bigint, expires_at timestamptz,
		state text, new_period boolean)
	LANGUAGE sql AS \$\$ INSERT INTO public.pwned SELECT 'le_group_heartbeat', current_user;
		SELECT 0, 'p0', 424242::bigint, pg_catalog.now() + \$3, 'held', true \$\$;
	RESET ROLE;};
}

# In one transaction: drop the extension (optionally create it again in
# schema $again), forge look-alikes in $schema (or run $forge) and end the
# backends of pg_leader whose application_name matches $apps.
sub swap_extension
{
	my (%a) = @_;
	my $again = $a{again} ? "CREATE EXTENSION leader_election SCHEMA $a{again};" : '';
	$node->safe_psql('postgres', "BEGIN; DROP EXTENSION leader_election CASCADE; $again"
		  . ($a{forge} // forge_sql($a{schema}))
		  . " SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
		  . " WHERE application_name LIKE '$a{apps}'; COMMIT;");
}

sub reset_extension
{
	my ($schema, $version) = @_;
	my $v = $version ? " VERSION '$version'" : '';
	$node->safe_psql('postgres', q{
		SET client_min_messages = warning;
		DROP EXTENSION IF EXISTS leader_election CASCADE;
		DO $$DECLARE f regprocedure;
		BEGIN
			FOR f IN SELECT oid FROM pg_proc WHERE proowner = 'mallory'::regrole LOOP
				EXECUTE 'DROP FUNCTION ' || f;
			END LOOP;
		END$$;
		DROP SCHEMA IF EXISTS s2 CASCADE;
		TRUNCATE pwned;}
		  . "CREATE EXTENSION leader_election SCHEMA $schema$v;");
}

sub pwned
{
	return $node->safe_psql('postgres', "SELECT coalesce(string_agg(fn || ' as ' || who, ', '), '') FROM pwned");
}

sub exits_within
{
	my ($c, $secs) = @_;
	return wait_for(sub { defined reap($c) }, $secs);
}

# --- a follower's campaign connection: the extension dropped, look-alikes in its schema ---
{
	reset_extension('public');
	$node->safe_psql('postgres', "SELECT le_acquire('k1', 'other', '60s')");
	my $c = start_candidate(dir => $dir, name => 'follower', dsn => $dsn, key => 'k1',
		opts => [ '--ttl', '3s', '--retry', '300ms' ],
		command => [ 'sh', '-c', "echo COMMAND RUNS >> $dir/ran.follower" ]);
	ok(wait_for(sub { log_has($c, qr/campaigning/) }, 20), 'campaign: a follower waits');
	swap_extension(schema => 'public', apps => 'pg_leader%');
	ok(exits_within($c, 15), 'campaign: the follower exits');
	is(reap($c), 78, 'campaign: with status 78 (extension missing)');
	ok(log_has($c, qr/not installed/), 'campaign: the log says the extension is not installed');
	ok(!-e "$dir/ran.follower", 'campaign: the command never ran');
	is(pwned(), '', 'campaign: no look-alike was called');
}

# --- the extension back in another schema, look-alikes in the first ---
{
	reset_extension('s1');
	$node->safe_psql('postgres', "SELECT s1.le_acquire('k2', 'other', '60s')");
	my $c = start_candidate(dir => $dir, name => 'moved', dsn => $dsn, key => 'k2',
		opts => [ '--ttl', '3s', '--retry', '300ms' ],
		command => [ 'sh', '-c', "echo COMMAND RUNS >> $dir/ran.moved" ]);
	ok(wait_for(sub { log_has($c, qr/campaigning/) }, 20), 'moved: a follower waits');
	$node->safe_psql('postgres', 'CREATE SCHEMA s2');
	swap_extension(schema => 's1', again => 's2', apps => 'pg_leader%');
	ok(exits_within($c, 15), 'moved: the follower exits');
	is(reap($c), 78, 'moved: with status 78');
	ok(log_has($c, qr/now in schema "s2", not in "s1"/), 'moved: the log names both schemas');
	ok(!-e "$dir/ran.moved", 'moved: the command never ran');
	is(pwned(), '', 'moved: no look-alike was called');
}

# --- a leader: its campaign and renewal connections reconnect to look-alikes ---
{
	reset_extension('public');
	my $c = start_candidate(dir => $dir, name => 'leader', dsn => $dsn, key => 'k3',
		opts => [ '--ttl', '3s' ],
		command => [ 'sh', '-c', "echo started >> $dir/ran.leader; exec sleep 120" ]);
	ok(wait_for(sub { -e "$dir/ran.leader" }, 20), 'leader: the leader runs its command');
	swap_extension(schema => 'public', apps => 'pg_leader%');
	ok(exits_within($c, 15), 'leader: the leader stops within the ttl and a few seconds');
	isnt(reap($c), 0, 'leader: not with success');
	ok(log_has($c, qr/is not part of extension "leader_election"|extension "leader_election" is not installed/),
		'leader: the log says why');
	is(pwned(), '', 'leader: no look-alike was called');
}

# --- a leader's renewal connection alone reconnects, to a look-alike le_renew ---
# It skips the extension lookup; a statement before each renewal checks that
# le_renew is the extension's.  The volatile look-alike records a call; the immutable one
# fails with division by zero if evaluated at all, even while planning.
for my $kind ('volatile', 'immutable')
{
	reset_extension('public');
	my $body = $kind eq 'volatile'
	  ? q{INSERT INTO public.pwned SELECT 'le_renew', current_user; SELECT pg_catalog.now() + $4}
	  : q{SELECT pg_catalog.now() + $4 * (1 / 0)};
	my $c = start_candidate(dir => $dir, name => "renew_$kind", dsn => $dsn, key => "k_$kind",
		opts => [ '--ttl', '3s' ],
		command => [ 'sh', '-c', "echo started >> $dir/ran.renew_$kind; exec sleep 120" ]);
	ok(wait_for(sub { -e "$dir/ran.renew_$kind" }, 20), "renewal, $kind look-alike: the leader runs its command");
	swap_extension(apps => 'pg_leader renew', forge => qq{
		SET ROLE mallory;
		CREATE FUNCTION public.le_renew(text, text, bigint, interval) RETURNS timestamptz
		LANGUAGE sql \U$kind\E AS \$\$ $body \$\$;
		RESET ROLE;});
	ok(exits_within($c, 15), "renewal, $kind look-alike: the leader stops");
	is(reap($c), 79, "renewal, $kind look-alike: with status 79 (leadership lost)");
	ok(log_has($c, qr/reason=renew_failed: (?:SQLSTATE 42883: )?function "public"\.le_renew\(\S+\) is not part of extension/),
		"renewal, $kind look-alike: its period ended, the look-alike refused");
	is(pwned(), '', "renewal, $kind look-alike: not called");
}

# --- a group member's heartbeat connection ---
{
	reset_extension('public');
	$node->safe_psql('postgres', "SELECT le_group_create('g', 2)");
	my $c = start_group_member(dir => $dir, name => 'member', dsn => $dsn, group => 'g',
		opts => [ '--ttl', '3s' ], command => [ 'sh', '-c', "echo started >> $dir/ran.member; exec sleep 120" ]);
	ok(wait_for(sub { -e "$dir/ran.member" }, 20), 'group: the member runs its commands');
	swap_extension(schema => 'public', apps => 'pg_leader%');
	ok(exits_within($c, 15), 'group: the member exits');
	is(reap($c), 78, 'group: with status 78');
	ok(log_has($c, qr/not installed/), 'group: the log says the extension is not installed');
	is(pwned(), '', 'group: no look-alike was called');
}

# --- what is evaluated while planning ---
# A look-alike le_renew written in SQL is inlined into the statement that
# calls it while that is planned, and the constant parts of its body are
# evaluated then: here an immutable function that calls a volatile one
# recording the call, as the client's role.  No check in the statement
# itself can come first.  On a new renewal connection (the look-alike made
# after the DROP), and on one that stays connected (an overload of other
# argument types, made while the extension is there, that the call
# resolves to once the extension is dropped).
sub planned_forge
{
	my ($args) = @_;
	return qq{
	SET ROLE mallory;
	CREATE FUNCTION public.le_record() RETURNS void LANGUAGE plpgsql
	AS \$\$BEGIN INSERT INTO public.pwned SELECT 'while planning', current_user; END\$\$;
	CREATE FUNCTION public.le_planned() RETURNS interval LANGUAGE plpgsql IMMUTABLE
	AS \$\$BEGIN PERFORM public.le_record(); RETURN interval '1 hour'; END\$\$;
	CREATE FUNCTION public.le_renew($args) RETURNS timestamptz
	LANGUAGE sql AS \$\$ SELECT pg_catalog.to_timestamp(0) + public.le_planned() \$\$;
	RESET ROLE;};
}

{
	reset_extension('public');
	my $c = start_candidate(dir => $dir, name => 'planned_new', dsn => $dsn, key => 'k_planned_new',
		opts => [ '--ttl', '3s' ],
		command => [ 'sh', '-c', "echo started >> $dir/ran.planned_new; exec sleep 120" ]);
	ok(wait_for(sub { -e "$dir/ran.planned_new" }, 20), 'planned, new renewal connection: the leader runs its command');
	swap_extension(apps => 'pg_leader renew', forge => planned_forge('text, text, bigint, interval'));
	ok(exits_within($c, 15), 'planned, new renewal connection: the leader stops');
	is(reap($c), 79, 'planned, new renewal connection: with status 79');
	is(pwned(), '', 'planned, new renewal connection: nothing of the look-alike ran');
}

{
	reset_extension('public');
	$node->safe_psql('postgres', planned_forge('varchar, varchar, bigint, interval'));
	my $c = start_candidate(dir => $dir, name => 'planned_kept', dsn => $dsn, key => 'k_planned_kept',
		opts => [ '--ttl', '3s' ],
		command => [ 'sh', '-c', "echo started >> $dir/ran.planned_kept; exec sleep 120" ]);
	ok(wait_for(sub { -e "$dir/ran.planned_kept" }, 20), 'planned, connected: the leader runs its command');
	is(pwned(), '', 'planned, connected: the overload is not called while the extension is there');
	swap_extension(apps => 'none', forge => '');
	ok(exits_within($c, 15), 'planned, connected: the leader stops');
	is(reap($c), 79, 'planned, connected: with status 79');
	is(pwned(), '', 'planned, connected: nothing of the overload ran');
}

# --- a follower that stays connected: an overload made while the extension is there ---
# It does not match the call while the extension's le_acquire does; once
# that is dropped it does, on the connection the follower already has.
{
	reset_extension('public');
	$node->safe_psql('postgres', "SELECT le_acquire('k_kept', 'other', '60s')");
	$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE FUNCTION public.le_acquire(varchar, varchar, interval, interval, jsonb, OUT acquired boolean,
		OUT fencing_token bigint, OUT holder text, OUT expires_at timestamptz, OUT new_period boolean)
	LANGUAGE sql AS $$ INSERT INTO public.pwned SELECT 'le_acquire', current_user;
		SELECT true, 424242::bigint, $2::text, pg_catalog.now() + $3, true $$;
	RESET ROLE;});
	my $c = start_candidate(dir => $dir, name => 'kept', dsn => $dsn, key => 'k_kept',
		opts => [ '--ttl', '3s', '--retry', '300ms' ],
		command => [ 'sh', '-c', "echo COMMAND RUNS >> $dir/ran.kept" ]);
	ok(wait_for(sub { log_has($c, qr/campaigning/) }, 20), 'connected: a follower waits');
	sleep 1;
	is(pwned(), '', 'connected: the overload is not called while the extension is there');
	swap_extension(apps => 'none', forge => '');
	ok(exits_within($c, 15), 'connected: the follower exits');
	is(reap($c), 78, 'connected: with status 78');
	ok(!-e "$dir/ran.kept", 'connected: the command never ran');
	is(pwned(), '', 'connected: the overload was not called');
}

# --- extension 1.0: look-alikes of functions only 1.1 has ---
# A role with CREATE on the schema can make le_acquire with 1.1's
# signature, or le_group_heartbeat, while the extension is there at 1.0.
{
	reset_extension('public', '1.0');
	$node->safe_psql('postgres', "SELECT le_acquire('k_10', 'other', '60s')");
	$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE FUNCTION public.le_acquire(text, text, interval, interval, jsonb, OUT acquired boolean,
		OUT fencing_token bigint, OUT holder text, OUT expires_at timestamptz, OUT new_period boolean)
	LANGUAGE sql AS $$ INSERT INTO public.pwned SELECT 'le_acquire', current_user;
		SELECT true, 424242::bigint, $2, pg_catalog.now() + $3, true $$;
	RESET ROLE;});
	my $c = start_candidate(dir => $dir, name => 'v10', dsn => $dsn, key => 'k_10',
		opts => [ '--ttl', '3s', '--retry', '300ms' ],
		command => [ 'sh', '-c', "echo COMMAND RUNS >> $dir/ran.v10" ]);
	ok(wait_for(sub { log_has($c, qr/campaigning/) }, 20), '1.0: a follower waits');
	sleep 2;
	ok(alive($c->{pid}), '1.0: the follower still waits');
	ok(!-e "$dir/ran.v10", '1.0: the command never ran');
	is(pwned(), '', '1.0: the look-alike of 1.1\'s le_acquire was not called');
	kill 'TERM', $c->{pid};
	ok(exits_within($c, 15), '1.0: the follower exits on SIGTERM');
}

{
	reset_extension('public', '1.0');
	$node->safe_psql('postgres', q{
	SET ROLE mallory;
	CREATE FUNCTION public.le_group_heartbeat(text, text, interval)
	RETURNS TABLE(partition integer, lease_key text, fencing_token bigint, expires_at timestamptz,
		state text, new_period boolean)
	LANGUAGE sql AS $$ INSERT INTO public.pwned SELECT 'le_group_heartbeat', current_user;
		SELECT 0, 'p0', 424242::bigint, pg_catalog.now() + $3, 'held', true $$;
	RESET ROLE;});
	my $c = start_group_member(dir => $dir, name => 'member10', dsn => $dsn, group => 'g',
		opts => [ '--ttl', '3s' ], command => [ 'sh', '-c', "echo started >> $dir/ran.member10; exec sleep 120" ]);
	ok(exits_within($c, 15), 'group, 1.0: the member exits');
	is(reap($c), 78, 'group, 1.0: with status 78');
	ok(!-e "$dir/ran.member10", 'group, 1.0: no command ran');
	is(pwned(), '', 'group, 1.0: the look-alike le_group_heartbeat was not called');
}

stop_all();
done_testing();
