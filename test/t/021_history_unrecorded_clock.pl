# G12, leader_election.history = off (sql/history_setting.sql has the rest): a
# backend remembers the periods it granted without a history row, so that
# ending them does not look for one.  A grant that rolled back must not stay
# remembered: after le_token_seq is set back by hand its token is drawn
# again, and with a server clock that repeats a reading (stepped back,
# frozen, coarse) so is its acquired_at; that new period is recorded, and
# its row must be closed when it ends, not left open for good (an open row
# also stops the pruning of the key's later rows).  Here the server's clock
# is frozen with libfaketime, driven through a file the server itself
# rewrites; monotonic clocks stay real.
use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my ($lib) = glob('/usr/lib/*/faketime/libfaketime.so.1');
plan skip_all => 'libfaketime is not installed (apt-get install faketime; test/lib/prereq.sh does)'
  unless $lib;

# Started below under faketime, so created here without the extension.
my $node = le_node('histclock', conf => "autovacuum = off\n", start => 0);
my $clock = $node->basedir . '/faketime';
open(my $fh, '>', $clock) or die "cannot write $clock: $!";
print $fh "+0\n";
close $fh;
{
	local $ENV{LD_PRELOAD} = $lib;
	local $ENV{FAKETIME_TIMESTAMP_FILE} = $clock;
	local $ENV{FAKETIME_NO_CACHE} = '1';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	local $ENV{TZ} = 'UTC';
	$node->start;
}
$node->safe_psql('postgres', 'CREATE EXTENSION leader_election');

# The clock follows the real one until the file names an instant (read as
# local time: the server runs with TZ=UTC); then it stands there until the
# file says +0 again.  Each scenario: a recorded period of 'a' on its key,
# then, with the clock frozen and the history off, a grant to 'b' that is
# undone ($undo: the SQL that makes it and rolls it back, setting psql's
# :t1 and :e1 to its token and expiry), then with the history on the
# sequence set back and the key granted to 'c', who gets the same token at
# the same instant, and releases it.
sub scenario
{
	my ($key, $undo) = @_;
	my $out = $node->safe_psql(
		'postgres', qq{
SELECT fencing_token AS t0 FROM le_acquire('$key', 'a', '1 minute') \\gset
SELECT le_release('$key', 'a', :t0) \\gset
COPY (SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')) TO '$clock';
SET leader_election.history = off;
$undo
RESET leader_election.history;
SELECT setval('le_token_seq', :t1 % 1099511627776 - 1) \\gset
SELECT fencing_token = :t1 AS same_token, expires_at = :'e1' AS same_instant
  FROM le_acquire('$key', 'c', '1 minute');
COPY (SELECT '+0') TO '$clock';
SELECT le_release('$key', 'c', :t1) AS released;
SELECT string_agg(holder || ':' || coalesce(end_reason, 'open'), ' ' ORDER BY fencing_token)
  FROM le_lease_history WHERE lease_key = '$key';
});
	return split /\n/, $out;
}

my %undo = (
	'the transaction rolled back' => q{
BEGIN;
SELECT fencing_token AS t1, expires_at AS e1 FROM le_acquire('ft1', 'b', '1 minute') \gset
ROLLBACK;},
	'a released savepoint inside one rolled back to' => q{
BEGIN;
SAVEPOINT s1;
SAVEPOINT s2;
SELECT fencing_token AS t1, expires_at AS e1 FROM le_acquire('ft2', 'b', '1 minute') \gset
RELEASE s2;
ROLLBACK TO s1;
COMMIT;},
	'a PL/pgSQL block whose error was caught' => q{
DO $$
DECLARE
  r record;
  m text;
BEGIN
  BEGIN
    SELECT * INTO r FROM le_acquire('ft3', 'b', '1 minute');
    RAISE EXCEPTION '%|%', r.fencing_token, r.expires_at;
  EXCEPTION WHEN raise_exception THEN
    GET STACKED DIAGNOSTICS m = MESSAGE_TEXT;
    PERFORM set_config('le_test.undone', m, false);
  END;
END $$;
SELECT split_part(current_setting('le_test.undone'), '|', 1) AS t1,
       split_part(current_setting('le_test.undone'), '|', 2)::timestamptz AS e1 \gset});

my %key = (
	'the transaction rolled back' => 'ft1',
	'a released savepoint inside one rolled back to' => 'ft2',
	'a PL/pgSQL block whose error was caught' => 'ft3');
for my $case (sort keys %undo)
{
	my @lines = scenario($key{$case}, $undo{$case});
	is($lines[0], 't|t', "$case: the token and the instant of the undone grant came again (the case tested)");
	is($lines[1], 't', "$case: the new period was released");
	is($lines[2], 'a:released c:released',
		"$case: and its history row is closed: one row per recorded period, none open");
}

$node->stop;
done_testing();
