# G9: the command is run as execvp runs it: an executable file without "#!"
# is run by /bin/sh (its arguments passed on); a file that is not executable
# gives 126, a name not found 127.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

my ($node, $dsn, $dir) = start_node('client_exec_fallback');

sub run_cmd
{
	my ($key, @cmd) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), 'run', '-d', $dsn, '-l', $key, '--ttl', '5s', '--', @cmd ],
		'<', \undef, '>', \$out, '2>', \$err, IPC::Run::timeout(60));
	return ($? >> 8, $out, $err);
}

my $script = "$dir/noshebang";
open(my $fh, '>', $script) or die;
print $fh "echo \"ran with \$# args: \$1 \$2\"\nexit 7\n";
close $fh;
chmod 0755, $script;

my ($rc, $out, $err) = run_cmd('sh-key', $script, 'a b', 'c');
is($rc, 7, 'a script without #! runs under /bin/sh and gives its own status') or diag($err);
like($out, qr/^ran with 2 args: a b c$/m, 'its arguments are passed on');

# found on PATH as well
{
	local $ENV{PATH} = "$dir:$ENV{PATH}";
	($rc, $out, $err) = run_cmd('sh-path', 'noshebang', 'x');
	is($rc, 7, 'a script without #! found on PATH runs under /bin/sh') or diag($err);
}

my $plain = "$dir/notexec";
open($fh, '>', $plain) or die;
print $fh "exit 0\n";
close $fh;
chmod 0644, $plain;
($rc, $out, $err) = run_cmd('noexec-key', $plain);
is($rc, 126, 'a file that is not executable: 126');

($rc, $out, $err) = run_cmd('missing-key', "$dir/no-such-file");
is($rc, 127, 'a missing command: 127');

$node->stop;
done_testing();
