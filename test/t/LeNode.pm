# Shared helper of the TAP tests: a PostgreSQL::Test::Cluster node with the
# extension created.
#
#   use lib $FindBin::Bin; use LeNode;
#   my $node = le_node('main');                          # started, extension in postgres
#   my $node = le_node('main', conf => "max_prepared_transactions = 5\n",
#                      init => { allows_streaming => 1 }, dbs => ['postgres', 'other']);
#   my $node = le_node('main', create => 0);             # started, no extension
#   my $standby = le_standby($primary, 'standby');       # streaming, started, caught up
#
# Options: conf (text appended to postgresql.conf before the start), init (a
# hash of arguments to init), dbs (the databases that get the extension;
# those other than postgres are created), create (0: no extension), start
# (0: neither started nor any extension created).  le_standby's primary must
# have been made with init => { allows_streaming => 1 }; conf as above.
package LeNode;

use strict;
use warnings;
use Exporter 'import';
use PostgreSQL::Test::Cluster;

our @EXPORT = qw(le_node le_standby);

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

1;
