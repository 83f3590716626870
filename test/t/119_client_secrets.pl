# G8: no secret of a connection string is ever printed: pg_leader's usage error
# for an invalid connection string masks every option libpq marks secret
# (password, sslpassword), in the keyword form (quoted, escaped, after a
# bad token) and in URIs read the way libpq reads them (a password with "?"
# or "/" in it, percent-encoded query names, libpq's own message quoting a
# part of the string, a password longer than 1 kB, more secrets than it
# keeps spans for), and libpq's connection errors quoting parts of a URI
# password it read as host, port or database.  pg_leader runs with default
# signal dispositions.
use strict;
use warnings;
use FindBin;
use lib $FindBin::RealBin;
use IPC::Run;
use PostgreSQL::Test::Utils;
use Test::More;
use LeClientTest;

# Run pg_leader to completion: (exit status, stderr).
sub cli
{
	my ($out, $err) = ('', '');
	IPC::Run::run([ pg_leader_cmd(), @_ ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout(60));
	return ($? >> 8, $out . $err);
}

my @cases = (
	[ 'keyword sslpassword', 'host=/tmp sslpassword=S3cretA bogus', 'S3cretA' ],
	[ 'keyword password with an escaped space', 'password=ab\ S3cretB junk', 'S3cretB' ],
	[ 'keyword password after a bad token', 'bogus password=S3cretC', 'S3cretC' ],
	[ 'keyword password quoted', "password = 'a b S3cretD' x", 'S3cretD' ],
	[ 'URI password with "?"', 'postgresql://u:S3c?retE@/db?bogus', 'retE' ],
	[ 'URI password with "/"', 'postgresql://u:S3c/retF@h/db?x', 'retF' ],
	[ 'URI query sslpassword', 'postgresql:///db?sslpassword=S3cretG&x', 'S3cretG' ],
	[ 'URI query name percent-encoded', 'postgresql:///db?pass%77ord=S3cretH&bad', 'S3cretH' ],
	[ 'URI password in libpq\'s message', 'postgresql://u:S3cretI%zz@/db', 'S3cretI' ],
	[ 'URI quoted whole by libpq', 'postgres://u:S3cretJ@[::1/db', 'S3cretJ' ],
	[ 'URI query password with "@"', 'postgresql://h/db?password=S3c@retK&bogus', 'retK' ],
	[ 'more secrets than spans', join(' ', map { "password=p$_" } 1 .. 40) . ' password=S3cretL bogus', 'S3cretL' ],
	[ 'URI password longer than 1 kB in libpq\'s message',
		'postgresql://u:' . ('a' x 1500) . 'S3cretM%zz@/db', 'S3cretM' ],
	[ 'URI password part "%00" (decodes to nothing)', 'postgresql://u:SecretV@%00@h/db', 'SecretV' ],
	[ 'URI password with "/", libpq quoting its end', 'postgresql://u:p/S3cretR%zz@h/db', 'S3cretR' ]);
for my $c (@cases)
{
	my ($name, $dsn, $secret) = @$c;
	for my $sub ('status', 'run')
	{
		my @args = $sub eq 'run' ? ('run', '-d', $dsn, '-l', 'k', '--', 'true') : ('status', '-d', $dsn);
		my ($rc, $err) = cli(@args);
		is($rc, 64, "$name ($sub): usage error");
		unlike($err, qr/\Q$secret\E/, "$name ($sub): the secret is not printed");
		like($err, qr/\*\*\*\*/, "$name ($sub): it is masked") if $sub eq 'status';
		note($err) if $err =~ /\Q$secret\E/;
	}
}

# A URI password libpq does not read whole: the rest is host, port or
# database to it, and its connection error quotes that part.
my @misread = (
	[ 'user with "@", then a password', 'postgresql://us@er:S3cretN@localhost:1/db', 'S3cretN' ],
	[ 'password with "@"', 'postgresql://u:pw@S3cretO@localhost:1/db', 'S3cretO' ],
	[ 'password with "/"', 'postgresql://u:S3cretP/x@localhost:1/db', 'S3cretP' ],
	[ 'password with "/" and an escape', 'postgresql://u:S3c%72etQ/x@localhost:1/db', 'S3cretQ' ],
	[ 'password with "@", a host list', 'postgresql://u:pw@a@localhost,SecretT@localhost/db', 'SecretT' ],
	[ 'password with "@" and a part of 500 bytes, message cut short',
		'postgresql://u:pw@' . ('h' x 500) . '@SecretU@localhost:1/db', 'h' x 10 ],
	[ 'password with many "@"', 'postgresql://us@er:' . join('@', map { "x$_" } 1 .. 30) . '@SecretS@localhost:1/db', 'SecretS' ]);
for my $c (@misread)
{
	my ($name, $dsn, $secret) = @$c;
	for my $sub ('status', 'run')
	{
		my @args = $sub eq 'run'
		  ? ('run', '-d', $dsn, '-l', 'k', '--no-wait', '--', 'true')
		  : ('status', '-d', $dsn);
		my ($rc, $err) = cli(@args);
		is($rc, 69, "$name ($sub): connection error");
		like($err, qr/could not connect to the server/, "$name ($sub): the message is readable");
		unlike($err, qr/\Q$secret\E/, "$name ($sub): the secret is not printed");
		note($err) if $err =~ /\Q$secret\E/;
	}
}

done_testing();
