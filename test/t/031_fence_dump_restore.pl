# G5 and G10 with G3 (state survives pg_dump/pg_restore): the
# scheduled jobs, their id sequence and the "highest accepted token" of
# le_fence_advance are dumped and restored, so after a restore a job id is
# not handed out twice, a schedule_key already created is not created again,
# and a token below the restored highest is still rejected.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib $FindBin::Bin;
use LeNode;

my $node = le_node('fence_dump');

$node->safe_psql('postgres', q{
SELECT acquired FROM le_acquire('sched', 'leader', '10 minutes');
SELECT le_schedule_job('sched', 1, 'job-' || i, 'work', clock_timestamp()) FROM generate_series(1, 3) AS i;
SELECT le_fence_advance('external', 7);
});

my $dump = PostgreSQL::Test::Utils::tempdir . '/fence.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('postgres') ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('restored'), $dump ], 'pg_restore');

is($node->safe_psql('restored', 'SELECT count(*) FROM le_scheduled_jobs'), '3', 'jobs restored');
is($node->safe_psql('restored', q{SELECT le_schedule_job('sched', 1, 'job-1', 'work', clock_timestamp())}),
   'f', 'a restored schedule_key is not created again');
is($node->safe_psql('restored', q{SELECT le_schedule_job('sched', 1, 'job-4', 'work', clock_timestamp())}),
   't', 'a new job can be created after the restore');
is($node->safe_psql('restored', q{SELECT job_id > 3 FROM le_scheduled_jobs WHERE schedule_key = 'job-4'}),
   't', 'the job id sequence continues after the restore');

my ($ret, $out, $err) = $node->psql('restored', q{SELECT le_fence_advance('external', 6)});
like($err, qr/fencing token 6 of resource "external" is stale/, 'highest accepted token survives the restore');
is($node->safe_psql('restored', q{SELECT le_fence_advance('external', 7)}), '7', 'the highest token itself is still accepted');

$node->stop;
done_testing();
