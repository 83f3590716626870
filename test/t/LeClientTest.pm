# Helpers of the pg_leader TAP tests (test/t/1NN_client_*.pl): start and
# signal real pg_leader processes, a job script that logs its start and
# stop with its fencing token, and readers of those logs and of the
# server's lease history.
package LeClientTest;

use strict;
use warnings;
use Exporter 'import';
use POSIX qw(:sys_wait_h setpgid);
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use IO::Select;
use IO::Socket::INET;
use IO::Socket::UNIX;
use Socket qw(SOCK_STREAM);
use FindBin;
use lib $FindBin::Bin;
use LeNode;

our @EXPORT = qw(start_node pg_leader_bin pg_leader_cmd start_candidate stop_all wait_for write_job
  read_events lease_state history_rows log_has alive reap log_events
  check_no_overlap spans pgid_of build_probe
  start_group_member group_node group_job group_instances group_holders group_rows_outside_periods
  group_overlaps tcp_proxy proxy_accept drop_answer_proxy);

my @started;    # every wrapper we started, killed at the end

# A started node named $name with the extension in database postgres;
# returns the node, its connection string and a temporary directory.
sub start_node
{
	my ($name) = @_;
	my $node = le_node($name);
	return ($node, $node->connstr('postgres'), PostgreSQL::Test::Utils::tempdir);
}

# The pg_leader of this build tree, else the installed one on PATH.
sub pg_leader_bin
{
	my $built = ($ENV{TESTDIR} // '.') . '/src/client/pg_leader';
	return -x $built ? $built : 'pg_leader';
}

# pg_leader as a command list for IPC::Run: through "env --default-signal",
# because the TAP harness ignores SIGPIPE and children inherit that; pg_leader
# must be tested with the signal dispositions a shell gives it.
sub pg_leader_cmd
{
	return ('env', '--default-signal', pg_leader_bin());
}

# In a forked child about to exec: every signal to its default disposition
# and none blocked, as a shell would start a program.
sub default_signals
{
	for my $sig (qw(PIPE INT TERM HUP QUIT CHLD ALRM USR1 USR2 TTIN TTOU TSTP))
	{
		$SIG{$sig} = 'DEFAULT';
	}
	POSIX::sigprocmask(POSIX::SIG_SETMASK(), POSIX::SigSet->new());
}

# Start "pg_leader run" in a process group of its own, stderr to a log file,
# with default signal dispositions.
# Returns { pid => ..., log => ..., name => ... }.
sub start_candidate
{
	my (%a) = @_;
	return start_pg_leader($a{dir}, $a{name}, 'run', '-d', $a{dsn}, '-l', $a{key},
		'--owner', $a{name}, @{ $a{opts} // [] }, '--', @{ $a{command} });
}

# Start "pg_leader group run" for member $a{name} of group $a{group}, as
# start_candidate starts run.
sub start_group_member
{
	my (%a) = @_;
	return start_pg_leader($a{dir}, $a{name}, 'group', 'run', '-d', $a{dsn}, '--group', $a{group},
		'--member', $a{name}, @{ $a{opts} // [] }, '--', @{ $a{command} });
}

# pg_leader with these arguments in a process group of its own, stdout and
# stderr appended to $dir/$name.log, with default signal dispositions.
sub start_pg_leader
{
	my ($dir, $name, @args) = @_;
	my $log = "$dir/$name.log";
	my @cmd = (pg_leader_bin(), @args);
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		setpgid(0, 0);
		# PostgreSQL::Test::Utils sets PGAPPNAME; let pg_leader name its connections
		delete $ENV{PGAPPNAME};
		open(STDOUT, '>>', $log) or POSIX::_exit(127);
		open(STDERR, '>>', $log) or POSIX::_exit(127);
		default_signals();
		exec('env', '--default-signal', @cmd) or print STDERR "exec: $!\n";
		POSIX::_exit(127);    # not through the test's END blocks
	}
	setpgid($pid, $pid);
	my $c = { pid => $pid, log => $log, name => $name };
	push @started, $c;
	return $c;
}

# Is this pid still running (and not a zombie of ours)?
sub alive
{
	my ($pid) = @_;
	return 0 unless kill(0, $pid);
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $line = <$fh>;
	return ($line =~ /\)\s+(\S)/ && $1 ne 'Z') ? 1 : 0;
}

# Process group of a pid (the command's group is its supervisor's pid), or 0.
sub pgid_of
{
	my ($pid) = @_;
	open(my $fh, '<', "/proc/$pid/stat") or return 0;
	my $line = <$fh>;
	return $line =~ /\)\s+\S+\s+\d+\s+(\d+)/ ? $1 : 0;
}

# Reap a wrapper if it exited; returns its exit status or undef.
sub reap
{
	my ($c) = @_;
	return $c->{status} if defined $c->{status};
	my $w = waitpid($c->{pid}, WNOHANG);
	if ($w == $c->{pid})
	{
		$c->{status} = WIFEXITED($?) ? WEXITSTATUS($?) : 128 + WTERMSIG($?);
	}
	return $c->{status};
}

# SIGKILL every wrapper still running (their commands die of PDEATHSIG).
sub stop_all
{
	for my $c (@started)
	{
		next if defined reap($c);
		kill 'CONT', $c->{pid};
		kill 'KILL', $c->{pid};
		waitpid($c->{pid}, 0);
	}
	@started = ();
}

# Poll $cond every 20 ms until true or $timeout seconds pass; returns
# the seconds waited, or undef on timeout.
sub wait_for
{
	my ($cond, $timeout) = @_;
	my $t0 = time();
	# the elapsed time, never 0 (true even when the condition held at once)
	my $took = sub { my $d = time() - $t0; $d > 0 ? $d : 1e-6 };
	while (time() - $t0 < $timeout)
	{
		return $took->() if $cond->();
		usleep(20_000);
	}
	return $cond->() ? $took->() : undef;
}

# A job for pg_leader: logs "start" and "stop" lines with its token, owner
# and pid to $events (atomic appends), beats every 0.1 s, runs $beats beats
# (0 = until terminated).  SIGTERM logs "stop" once and exits (the wrapper
# and its watchdog may both send it).
sub write_job
{
	my ($dir, $events, $beats) = @_;
	my $path = "$dir/job.sh";
	open(my $fh, '>', $path) or die;
	print $fh <<"EOF";
#!/bin/sh
ev='$events'
line() { echo "\$1 \$LE_FENCING_TOKEN \$LE_OWNER_ID \$\$ \$(date +%s.%N)" >> "\$ev"; }
line start
trap 'trap "" TERM; line stop; exit 0' TERM
i=0
while [ $beats -eq 0 ] || [ \$i -lt $beats ]; do
	sleep 0.1
	line beat
	i=\$((i + 1))
done
line stop
EOF
	close($fh);
	chmod 0755, $path;
	return $path;
}

# Lines of an events file as [kind, token, owner, pid, time].
sub read_events
{
	my ($events) = @_;
	return () unless -e $events;
	open(my $fh, '<', $events) or die;
	my @ev;
	while (<$fh>)
	{
		chomp;
		my @f = split / /;
		push @ev, [@f] if @f == 5;
	}
	return @ev;
}

# holder|token|is_valid of a lease, "" if none.
sub lease_state
{
	my ($node, $key) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce(holder, '-') || '|' || fencing_token || '|' || CASE WHEN is_valid THEN 't' ELSE 'f' END FROM le_leases WHERE lease_key = '$key'"
	);
}

# History rows: [holder, token, acquired_at epoch, ended_at epoch or '', end_reason].
sub history_rows
{
	my ($node, $key) = @_;
	my $out = $node->safe_psql('postgres',
		"SELECT holder, fencing_token, extract(epoch FROM acquired_at), coalesce(extract(epoch FROM ended_at)::text, ''), coalesce(end_reason, '')
		   FROM le_lease_history WHERE lease_key = '$key' ORDER BY fencing_token");
	return map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/, $out;
}

# Does the wrapper's log contain a line matching $re?
sub log_has
{
	my ($c, $re) = @_;
	open(my $fh, '<', $c->{log}) or return 0;
	local $/;
	my $text = <$fh>;
	return $text =~ $re;
}

# Text log of a wrapper as [epoch, event, token, reason] per line.
sub log_events
{
	my ($c) = @_;
	open(my $fh, '<', $c->{log}) or return ();
	my @ev;
	while (<$fh>)
	{
		next
		  unless /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)\.(\d+)Z pg_leader\[\d+\] (\S+)/;
		my $t = timegm($6, $5, $4, $3, $2 - 1, $1) + $7 / 1000;
		my $ev = $8;
		my ($tok) = /token=(\d+)/;
		my ($reason) = /reason=([^\s:]+)/;
		push @ev, [ $t, $ev, $tok // 0, $reason // '' ];
	}
	return @ev;
}

# Runs of each job from an events file: [token, owner, pid, start, end]
# (end undef if the job never logged its stop).
sub spans
{
	my ($events) = @_;
	my %run;
	my @spans;
	for my $e (read_events($events))
	{
		my ($kind, $tok, $owner, $pid, $t) = @$e;
		if ($kind eq 'start')
		{
			$run{$pid} = [ $tok, $owner, $pid, $t, undef ];
			push @spans, $run{$pid};
		}
		elsif ($kind eq 'stop' && $run{$pid})
		{
			$run{$pid}[4] = $t;
		}
	}
	return @spans;
}

# Check that jobs ran one at a time with rising tokens; returns a list of
# problems (empty when fine).
sub check_no_overlap
{
	my ($events) = @_;
	my @problems;
	my ($open, $last_tok) = (undef, 0);
	for my $e (read_events($events))
	{
		my ($kind, $tok, $owner, $pid) = @$e;
		if ($kind eq 'start')
		{
			push @problems, "start of $owner/$tok while $open->[1]/$open->[0] runs" if $open;
			push @problems, "token $tok not above $last_tok" if $tok <= $last_tok;
			$open = [ $tok, $owner, $pid ];
			$last_tok = $tok;
		}
		elsif ($kind eq 'stop')
		{
			push @problems, "stop of $owner/$tok that is not running"
			  unless $open && $open->[2] == $pid;
			$open = undef;
		}
		elsif ($kind eq 'beat')
		{
			push @problems, "beat of $owner/$tok while it is not the running job"
			  unless $open && $open->[2] == $pid;
		}
	}
	return @problems;
}

# A started node (see start_node) with group $group of $n partitions and
# the table work that group_job writes; returns (node, dsn, dir).
sub group_node
{
	my ($name, $group, $n) = @_;
	my ($node, $dsn, $dir) = start_node($name);
	$node->safe_psql('postgres',
		'CREATE TABLE work (part integer, token bigint, member text, written_at timestamptz DEFAULT clock_timestamp())');
	$node->safe_psql('postgres', "SELECT le_group_create('$group', $n)");
	return ($node, $dsn, $dir);
}

# A job for "pg_leader group run": logs "start" and (on SIGTERM, unless
# $opt{ignore_term}) "stop" lines to $events as "KIND PARTITION TOKEN
# MEMBER PID TIME", and writes a fenced row (le_fence_check of its
# partition's key and token, then an INSERT into table work) every 100 ms
# on one psql session of its own (fed through a FIFO, so that the loop
# runs in the job's own shell).  With ignore_term, psql ignores SIGTERM
# too (inherited).  It exits 3 on its own when the file
# $dir/exit.PARTITION exists (removed first).
sub group_job
{
	my ($dir, $events, %opt) = @_;
	my $path = "$dir/group_job.sh";
	my $term = $opt{ignore_term}
	  ? "trap '' TERM"
	  : "trap 'trap \"\" TERM; line stop; exit 0' TERM";
	open(my $fh, '>', $path) or die;
	print $fh <<"EOF";
#!/bin/sh
ev='$events'
line() { echo "\$1 \$LE_PARTITION \$LE_FENCING_TOKEN \$LE_OWNER_ID \$\$ \$(date +%s.%N)" >> "\$ev"; }
line start
$term
fifo='$dir/fifo.'\$\$
mkfifo "\$fifo"
psql -X -q -o /dev/null "\$LE_DSN" < "\$fifo" 2>> '$dir/group_job.err' &
exec 3> "\$fifo"
rm -f "\$fifo"
while :; do
	if [ -e '$dir/exit.'\$LE_PARTITION ]; then rm -f '$dir/exit.'\$LE_PARTITION; line exit; exit 3; fi
	echo "BEGIN; SELECT le_fence_check('\$LE_LEASE_KEY', \$LE_FENCING_TOKEN);" >&3
	echo "INSERT INTO work VALUES (\$LE_PARTITION, \$LE_FENCING_TOKEN, '\$LE_OWNER_ID'); COMMIT;" >&3
	sleep 0.1
done
EOF
	close($fh);
	chmod 0755, $path;
	return $path;
}

# Live instances of a group job: partition => [[token, member, pid, start]...]
# for every instance that logged its start, has not logged its end, and runs.
sub group_instances
{
	my ($events) = @_;
	my %by_pid;
	return {} unless -e $events;
	open(my $fh, '<', $events) or die;
	while (<$fh>)
	{
		my @f = split ' ';
		next unless @f == 6;
		my ($kind, $part, $tok, $member, $pid, $t) = @f;
		if ($kind eq 'start') { $by_pid{$pid} = [ $part, $tok, $member, $pid, $t ]; }
		else { delete $by_pid{$pid}; }
	}
	close($fh);
	my %live;
	for my $i (values %by_pid)
	{
		push @{ $live{ $i->[0] } }, [ @$i[ 1 .. 4 ] ] if alive($i->[3]);
	}
	return \%live;
}

# The server's view of group $group: partition => "holder|token" of the
# partitions validly held.
sub group_holders
{
	my ($node, $group) = @_;
	my %h;
	for (split /\n/, $node->safe_psql('postgres',
		"SELECT partition, holder, fencing_token FROM le_group_partitions WHERE group_name = '$group' AND is_valid"))
	{
		my ($p, $holder, $tok) = split /\|/;
		$h{$p} = "$holder|$tok";
	}
	return \%h;
}

# Rows of table work (part, token, member, written_at) that were not
# written inside their token's ownership period of partition "part"
# (le_lease_history; an open period ends at its expiry), as text lines.
sub group_rows_outside_periods
{
	my ($node, $group) = @_;
	return grep { $_ ne '' } split /\n/, $node->safe_psql('postgres', qq{
		SELECT w.part, w.token, w.member, w.written_at FROM work w
		 WHERE NOT EXISTS (
		   SELECT 1 FROM le_lease_history h
		    WHERE h.lease_key = 'le:group:$group:' || w.part AND h.fencing_token = w.token
		      AND w.written_at >= h.acquired_at
		      AND w.written_at < coalesce(h.ended_at,
		            (SELECT l.expires_at FROM le_leases l
		              WHERE l.lease_key = h.lease_key AND l.fencing_token = h.fencing_token),
		            'infinity'))
		 ORDER BY w.written_at});
}

# Per partition, instances that ran at the same time (from the events of a
# job that logs every end): a list of problems, empty when none overlapped
# and tokens never went back.
sub group_overlaps
{
	my ($events) = @_;
	my (%open, %last, @problems);
	open(my $fh, '<', $events) or die;
	while (<$fh>)
	{
		my ($kind, $part, $tok, $member, $pid) = split ' ';
		if ($kind eq 'start')
		{
			push @problems, "partition $part: $member/$tok started while $open{$part} runs"
			  if $open{$part};
			push @problems, "partition $part: token $tok below $last{$part}"
			  if $last{$part} && $tok < $last{$part};
			$open{$part} = "$member/$tok/$pid";
			$last{$part} = $tok;
		}
		elsif ($open{$part} && $open{$part} eq "$member/$tok/$pid")
		{
			delete $open{$part};
		}
	}
	close($fh);
	return @problems;
}

# A TCP proxy on 127.0.0.1 in front of $node's Unix socket: a child process
# runs $serve->($listen, $path) (the listening socket, the node's socket
# path) until it is killed; returns its pid and port.  The caller kills it.
# $serve must skip sockets it closed earlier in the same select round.
sub tcp_proxy
{
	my ($node, $serve) = @_;
	my $listen = IO::Socket::INET->new(Listen => 16, LocalAddr => '127.0.0.1', LocalPort => 0,
		Proto => 'tcp', ReuseAddr => 1) or die "listen: $!";
	my $port = $listen->sockport;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		# A write to a peer that went away fails instead of killing the
		# proxy, and the proxy never ends through the test's END blocks
		# (they would stop the node).
		$SIG{PIPE} = 'IGNORE';
		eval { $serve->($listen, $node->host . '/.s.PGSQL.' . $node->port); };
		print STDERR "# tcp_proxy: $@" if $@;
		POSIX::_exit(1);
	}
	close($listen);
	return ($pid, $port);
}

# In a tcp_proxy: accept a client on $listen and connect it to the node's
# socket $path; the two are each other's entry in %$peer and both are
# added to the IO::Select $sel.  Returns (client, server), or () when
# either failed.
sub proxy_accept
{
	my ($listen, $path, $peer, $sel) = @_;
	my $c = $listen->accept or return ();
	my $u = IO::Socket::UNIX->new(Type => SOCK_STREAM, Peer => $path) or return ();
	$peer->{$c} = $u;
	$peer->{$u} = $c;
	$sel->add($c, $u);
	return ($c, $u);
}

# A tcp_proxy that passes everything on, except that while the file $arm
# exists, the first DataRow from the server for which $match->($message)
# is true is dropped with the connection: $arm is removed, the client side
# closed, the server side after it (an answer lost after its commit).
# Returns the proxy's pid and port.
sub drop_answer_proxy
{
	my ($node, $arm, $match) = @_;
	return tcp_proxy($node, sub {
		my ($listen, $path) = @_;
		my $sel = IO::Select->new($listen);
		my (%peer, %from_server, %buf);
		for (;;)
		{
			for my $fh ($sel->can_read(1))
			{
				next unless $fh == $listen || exists $peer{$fh};    # closed in this round
				if ($fh == $listen)
				{
					my (undef, $s) = proxy_accept($listen, $path, \%peer, $sel) or next;
					$from_server{$s} = 1;
					$buf{$s} = '';
					next;
				}
				my $other = $peer{$fh};
				my $n = sysread($fh, my $data, 65536);
				if (!$n)
				{
					for ($fh, $other) { $sel->remove($_); delete $peer{$_}; close($_); }
					next;
				}
				if (!$from_server{$fh})
				{
					syswrite($other, $data);
					next;
				}
				$buf{$fh} .= $data;
				my ($out, $drop) = ('', 0);
				while (length($buf{$fh}) >= 5)
				{
					my ($type, $len) = unpack('a N', $buf{$fh});
					last if length($buf{$fh}) < 1 + $len;
					my $msg = substr($buf{$fh}, 0, 1 + $len, '');
					if ($type eq 'D' && -e $arm && $match->($msg))
					{
						unlink $arm;
						$drop = 1;
						last;
					}
					$out .= $msg;
				}
				syswrite($other, $out) if length $out;
				if ($drop)
				{
					for ($other, $fh) { $sel->remove($_); delete $peer{$_}; close($_); }
				}
			}
		}
	});
}

# Build test/c/le_probe.c (or test/c/$source) into $exe against the client
# library; returns (ok, compiler messages).  Without $sanitize it links the library of this
# build tree (src/client); with a -fsanitize= list (e.g.
# "address,undefined", "thread") it builds a copy of the library with
# src/client/Makefile's SANITIZE= (the flags test/sanitize.sh uses too) in
# a directory of its own, so the tree's build stays as it is, and compiles
# the probe with the same list.
sub build_probe
{
	my ($exe, $sanitize, $source) = @_;
	my $top = $ENV{TESTDIR} // '.';
	my $cdir = "$top/src/client";
	my $inc = `pg_config --includedir`;
	my $libdir = `pg_config --libdir`;
	chomp($inc, $libdir);
	my @san;
	if ($sanitize)
	{
		my $copy = "$exe.build";
		mkdir $copy;
		mkdir "$copy/src";
		mkdir "$copy/src/client";
		PostgreSQL::Test::Utils::system_log('cp', glob("$cdir/*.[ch]"), "$cdir/Makefile", "$copy/src/client")
		  == 0 or return (0, 'cannot copy the client sources');
		PostgreSQL::Test::Utils::system_log('cp', "$top/leader_election.control", $copy);
		my ($o, $e) = ('', '');
		IPC::Run::run([ 'make', '-s', '-C', "$copy/src/client", 'PG_CONFIG=pg_config',
				"SANITIZE=$sanitize", 'libleader_election_client.a' ], '>', \$o, '2>', \$e)
		  or return (0, "library build with SANITIZE=$sanitize failed: $e");
		$cdir = "$copy/src/client";
		@san = ('-g', "-fsanitize=$sanitize", '-fno-omit-frame-pointer');
	}
	my ($o, $e) = ('', '');
	my $ok = IPC::Run::run(
		[ 'cc', '-Wall', '-Wextra', '-Werror', '-pthread', @san, "-I$cdir", "-I$inc",
		  "$FindBin::RealBin/../c/" . ($source // 'le_probe.c'), "$cdir/libleader_election_client.a",
		  "-L$libdir", '-lpq', '-o', $exe ],
		'>', \$o, '2>', \$e);
	return ($ok, $e);
}

END { stop_all(); }

1;
