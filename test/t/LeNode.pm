# Shared helper of the TAP tests: a PostgreSQL::Test::Cluster node with the
# extension created.
#
#   use lib $FindBin::Bin; use LeNode;
#   my $node = le_node('main');                          # started, extension in postgres
#   my $node = le_node('main', conf => "max_prepared_transactions = 5\n",
#                      init => { allows_streaming => 1 }, dbs => ['postgres', 'other']);
#   my $node = le_node('main', create => 0);             # started, no extension
#   my $standby = le_standby($primary, 'standby');       # streaming, started, caught up
#   my $via = le_pgbouncer($node, pool_size => 2);       # connstr through PgBouncer
#
# Options: conf (text appended to postgresql.conf before the start), init (a
# hash of arguments to init), dbs (the databases that get the extension;
# those other than postgres are created), create (0: no extension), start
# (0: neither started nor any extension created).  le_standby's primary must
# have been made with init => { allows_streaming => 1 }; conf as above.
# le_pgbouncer starts PgBouncer in transaction mode on a Unix socket in front
# of the node's postgres database (pool_size server connections, default 2;
# max_clients, default 20), waits until it answers, stops it when the test
# ends, and returns the connection string; undef when PgBouncer is not
# installed (the caller skips).  le_overlapping_periods($node) counts the
# pairs of periods of one key in le_lease_history where the later token's
# period began before the earlier one ended (0: tokens rise, no overlap).
package LeNode;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils ();

our @EXPORT = qw(le_node le_standby le_pgbouncer le_overlapping_periods);

my $pgbouncer = '/usr/sbin/pgbouncer';
my @bouncer_pidfiles;
END { system('sh', '-c', "kill \$(cat '$_') 2>/dev/null") for grep { -f } @bouncer_pidfiles; }

sub le_node
{
	my ($name, %opt) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%{ $opt{init} // {} });
	$node->append_conf('postgresql.conf', $opt{conf}) if defined $opt{conf};
	return $node if defined $opt{start} && !$opt{start};
	$node->start;
	return $node if defined $opt{create} && !$opt{create};
	for my $db (@{ $opt{dbs} // ['postgres'] })
	{
		$node->safe_psql('postgres', "CREATE DATABASE \"$db\"") if $db ne 'postgres';
		$node->safe_psql($db, 'CREATE EXTENSION leader_election');
	}
	return $node;
}

sub le_standby
{
	my ($primary, $name, %opt) = @_;
	my $backup = "${name}_base";
	$primary->backup($backup);
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, $backup, has_streaming => 1);
	$standby->append_conf('postgresql.conf', $opt{conf}) if defined $opt{conf};
	return $standby if defined $opt{start} && !$opt{start};
	$standby->start;
	$primary->wait_for_catchup($standby);
	return $standby;
}

sub le_pgbouncer
{
	my ($node, %opt) = @_;
	return undef unless -x $pgbouncer;
	my $dir = PostgreSQL::Test::Utils::tempdir;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	my $pool = $opt{pool_size} // 2;
	my $clients = $opt{max_clients} // 20;
	open my $ini, '>', "$dir/pgbouncer.ini" or die $!;
	print $ini "[databases]\n",
	  "postgres = host=" . $node->host . " port=" . $node->port . " dbname=postgres\n",
	  "[pgbouncer]\nlisten_addr =\nlisten_port = $port\nunix_socket_dir = $dir\n",
	  "auth_type = trust\nauth_file = $dir/users.txt\npool_mode = transaction\n",
	  "default_pool_size = $pool\nmax_client_conn = $clients\n",
	  "logfile = $dir/pgbouncer.log\npidfile = $dir/pgbouncer.pid\n";
	close $ini;
	open my $users, '>', "$dir/users.txt" or die $!;
	print $users qq{"$user" ""\n};
	close $users;
	push @bouncer_pidfiles, "$dir/pgbouncer.pid";
	system($pgbouncer, '-d', "$dir/pgbouncer.ini") == 0 or die "pgbouncer did not start";
	my $via = "host=$dir port=$port dbname=postgres user=$user";
	for (1 .. 50)
	{
		return $via if $node->psql('postgres', 'SELECT 1', connstr => $via) == 0;
		select(undef, undef, undef, 0.1);
	}
	die "pgbouncer does not answer at $via";
}

sub le_overlapping_periods
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT count(*) FROM le_lease_history x JOIN le_lease_history y USING (lease_key)
		 WHERE x.fencing_token < y.fencing_token
		   AND (x.ended_at IS NULL OR y.acquired_at < x.ended_at)});
}

1;
