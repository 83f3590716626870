# G5 with a second extension: a fenced write made by another extension's
# PRE_COMMIT callback that runs after the fence's commit-time check (here
# test/c/late_writer.c, loaded before leader_election, whose callbacks are then
# called first) holds no fence lock and is never checked again; it must make
# the commit fail (55000), so that no stale row commits after a newer grant.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('late');

# Build the stand-in extension into the test's own directory.
my $inc = $node->config_data('--includedir-server');
my $so = "$PostgreSQL::Test::Utils::tmp_check/late_writer.so";
my $src = "test/c/late_writer.c";
system('cc', '-shared', '-fPIC', '-O0', "-I$inc", '-o', $so, $src) == 0
  or BAIL_OUT("cannot build $src");

$node->safe_psql('postgres', q{
CREATE TABLE lw (id serial, fencing_token bigint NOT NULL);
SELECT le_protect('lw', 'k');
});
my $tok = $node->safe_psql('postgres', "SELECT fencing_token FROM le_acquire('k', 'old', '10 minutes')");

my ($ret, $out, $err) = $node->psql('postgres', qq{
\\set VERBOSITY verbose
LOAD '$so';
LOAD 'leader_election';
BEGIN;
SET LOCAL late_writer.sql = 'INSERT INTO lw (fencing_token) VALUES ($tok)';
COMMIT;
});
like($err, qr/55000: fenced write after the commit-time check of the fence/,
	'a fenced write after the commit-time check fails the commit with 55000');
is($node->safe_psql('postgres', 'SELECT count(*) FROM lw'), '0', 'the late write did not commit');

# Fenced writes before COMMIT in such a session still commit.
($ret, $out, $err) = $node->psql('postgres', qq{
LOAD '$so';
LOAD 'leader_election';
BEGIN;
INSERT INTO lw (fencing_token) VALUES ($tok);
COMMIT;
});
is($ret, 0, 'a fenced write before COMMIT commits') or diag($err);
is($node->safe_psql('postgres', 'SELECT count(*) FROM lw'), '1', 'its row is there');

$node->stop;
done_testing();
