# G9: le_config.renew_by_ms with the default renew interval: the default
# leaves room for renew_by_ms (a third of ttl - margin - renew_by_ms), so
# an elector that sets only renew_by_ms is accepted; a renew_by_ms that
# leaves no room at all is still refused with a message naming the rule.
# Uses the probe program test/c/le_probe.c; no server is needed.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my $cc = `sh -c 'command -v cc'`;
plan skip_all => 'no C compiler' unless $cc;

my $dir = PostgreSQL::Test::Utils::tempdir;
my ($ok, $err) = build_probe("$dir/le_probe");
ok($ok, 'the probe program builds') or diag($err);

# Run the probe; returns its stdout.
sub probe
{
	my ($o, $e) = ('', '');
	IPC::Run::run([ "$dir/le_probe", @_ ], '>', \$o, '2>', \$e, IPC::Run::timeout(30));
	note("le_probe @_: $o$e");
	return $o;
}

like(probe('renewby', '', 'k', 1000, 400), qr/^created$/m,
	'ttl 1 s, renew_by 400 ms, default renew: accepted');
like(probe('renewby', '', 'k', 15000, 5000), qr/^created$/m,
	'ttl 15 s, renew_by 5 s, default renew: accepted');
like(probe('renewby', '', 'k', 1000, 900), qr/^refused: .*renew_by/m,
	'renew_by leaving no room: refused, naming renew_by');

done_testing();
