# G11: Unit test of the client's NOTIFY payload parser (src/client/le_notify.c)
# with hostile payloads: truncated JSON, huge numbers, escapes, \u0000 and
# embedded NUL, very long strings, deep nesting.  Runs the C test program
# src/client/test_notify (built by src/client/Makefile) and passes its TAP
# lines on.
use strict;
use warnings;
use Test::More;

my $prog = ($ENV{TESTDIR} // '.') . '/src/client/test_notify';
plan skip_all => "$prog not built" unless -x $prog;

my @out = `$prog`;
my $status = $? >> 8;
my $n = 0;
for (@out)
{
	chomp;
	if (/^(ok|not ok) \d+ - (.*)$/)
	{
		ok($1 eq 'ok', "parser: $2");
		$n++;
	}
}
cmp_ok($n, '>=', 50, "the parser test ran its checks ($n)");
is($status, 0, 'and exited 0');
done_testing();
