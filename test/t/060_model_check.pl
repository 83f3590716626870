# G1, G3, G5, G9: the model check of the lease and fence protocol.
# test/model/check.sh explores every interleaving of test/model/fence.pml
# within its bounds with spin (2 clients with 2 writing sessions, 3 clients
# with one) and finds no violation; each of its mutants (the token read
# before the fence lock is taken, acquire without the fence lock, writers
# that lock at the early check, a fence lock let go before the commit
# record, a commit-time check that ignores expiry, a transactional token
# sequence) must be caught.  It runs a second
# time with the token read before the lock in the checked model itself,
# the script must fail and show the counterexample.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

my $script = ($ENV{TESTDIR} // '.') . '/test/model/check.sh';
ok(-x $script, 'test/model/check.sh exists');

my ($stdout, $stderr);
my $ok = IPC::Run::run([$script], '>', \$stdout, '2>', \$stderr);
note($stdout);
note($stderr) if $stderr ne '';
ok($ok, 'model check passes (exit 0)');

# Every check ran to its end over a state space of some size.
for my $run ('2 clients, 2 writers', '3 clients, 1 writer')
{
	like($stdout, qr/^ok: \Q$run\E: [1-9][0-9]* states explored, no violation/m,
		"$run: exhaustive search without violation");
}
for my $m ('token read before the fence lock', 'no fence lock in acquire',
	'writer locks at the early check', 'fence lock released before the commit record',
	'commit-time check ignores expiry', 'transactional token sequence')
{
	like($stdout, qr/^ok: mutant \Q$m\E \(P[0-9]\) caught: assertion violated/m,
		"mutant caught: $m");
}
like($stdout, qr/^model check: PASS$/m, 'summary line');

# The script fails when the checked model itself has the bug.
{
	local $ENV{LE_MODEL_EXTRA} = '-DMUTANT_READ_BEFORE_LOCK';
	my ($out, $err);
	my $passed = IPC::Run::run([$script], '>', \$out, '2>', \$err);
	ok(!$passed, 'a violation in the checked model makes check.sh fail');
	like($out, qr/^VIOLATION: 2 clients, 2 writers: .*assertion violated \(\(lockok\[me\]&&\(r_tok==mytok\[me\]\)\)/m,
		'the violated property is named');
	like($out, qr/^counterexample/m, 'a counterexample is printed');
	like($out, qr/^model check: FAIL$/m, 'summary line says FAIL');
}

done_testing();
