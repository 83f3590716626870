# The documents: every relative link and #anchor in README.md,
# CONTRIBUTING.md and doc/*.md resolves (test/check_links.py), and META.json
# follows the PGXN META spec with the control file's version
# (test/check_meta.py); no two C files of src/, nor of src/client/,
# call each other (test/check_calls.py), and no C file of src/ or src/client/ has a function
# over 150 lines or a header comment over 25 (test/check_functions.py); no
# file outside CHANGELOG.md names an issue, a helper or a lettered run
# (test/check_history_words.py).  No server is needed.
use strict;
use warnings;

use PostgreSQL::Test::Utils;
use Test::More;

my $tree = $ENV{TESTDIR} // '.';
for my $check (['check_links.py', 'every relative link and anchor of the documents resolves'],
	['check_meta.py', 'META.json follows the PGXN META spec and the control file'],
	['check_calls.py', 'no two C files of src/, nor of src/client/, call each other'],
	['check_functions.py', 'no function over 150 lines, no header over 25 lines in src/ and src/client/'],
	['check_history_words.py', 'no file outside CHANGELOG.md names an issue, a helper or a run'])
{
	my ($script, $name) = @$check;
	my ($stdout, $stderr);
	my $ok = IPC::Run::run(['/usr/bin/python3', "$tree/test/$script", $tree], '>', \$stdout, '2>', \$stderr);
	ok($ok, $name) or diag($stdout . $stderr);
}

done_testing();
