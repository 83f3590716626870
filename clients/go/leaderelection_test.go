// Tests of the Go client against a real server with the extension, whose
// connection string is in LE_TEST_DSN (test/t/141_go_client.pl starts one).
// Times are never asserted absolutely: only orders of events against the
// server's own expiry. Tests that mostly wait, on keys of their own, run in
// parallel once the others are done.

package leaderelection

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := os.Getenv("LE_TEST_DSN")
	if dsn == "" {
		t.Fatal("LE_TEST_DSN is not set (run through test/t/141_go_client.pl)")
	}
	pool, err := pgxpool.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var keySeq int64

func testKey(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d-%d", t.Name(), os.Getpid(), atomic.AddInt64(&keySeq, 1))
}

// serverLease reads the lease's row from le_leases.
func serverLease(t *testing.T, pool *pgxpool.Pool, key string) (holder *string, token int64, expires *time.Time) {
	t.Helper()
	err := pool.QueryRow(context.Background(),
		"SELECT holder, fencing_token, expires_at FROM le_leases WHERE lease_key = $1", key).
		Scan(&holder, &token, &expires)
	if err != nil {
		t.Fatal(err)
	}
	return
}

func fastOpts() Options {
	return Options{Name: "t", TTL: 2 * time.Second, Retry: 100 * time.Millisecond}
}

// G1, G4: acquire, several renewals (the server's expiry moves), release.
func TestAcquireRenewRelease(t *testing.T) {
	t.Parallel() // its own key; mostly waiting
	pool := testPool(t)
	key := testKey(t)
	var owner string
	var token int64
	err := Run(context.Background(), pool, key, fastOpts(), func(ctx context.Context, l *Lease) error {
		owner, token = l.Owner(), l.Token()
		h, tok, exp0 := serverLease(t, pool, key)
		if h == nil || *h != owner || tok != token {
			return fmt.Errorf("server holder %v token %d, want %s %d", h, tok, owner, token)
		}
		for i := 0; i < 4; i++ {
			time.Sleep(500 * time.Millisecond) // 2 s in all: longer than the ttl
			if !l.IsLeader() {
				return fmt.Errorf("not leader after %d renewal intervals (%s)", i, l.Reason())
			}
		}
		if _, _, exp := serverLease(t, pool, key); !exp.After(*exp0) {
			return fmt.Errorf("expiry did not move: %v then %v", exp0, exp)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := serverLease(t, pool, key); h != nil {
		t.Fatalf("not released: holder %s", *h)
	}
	var reason string
	if err := pool.QueryRow(context.Background(),
		"SELECT end_reason FROM le_lease_history WHERE lease_key = $1 AND fencing_token = $2",
		key, token).Scan(&reason); err != nil || reason != "released" {
		t.Fatalf("history end_reason %q, %v", reason, err)
	}
}

// G1, G3: two Runs in one process with the same name are two owners: the
// second does not lead while the first does, takes over when it stops,
// with a higher token.
func TestTwoRunsTakeover(t *testing.T) {
	t.Parallel() // its own key; mostly waiting
	pool := testPool(t)
	key := testKey(t)
	opts := fastOpts()
	opts.Recampaign = true
	first := make(chan *Lease, 1)
	ctxA, stopA := context.WithCancel(context.Background())
	doneA := make(chan error, 1)
	go func() {
		doneA <- Run(ctxA, pool, key, opts, func(ctx context.Context, l *Lease) error {
			first <- l
			<-ctx.Done()
			return nil
		})
	}()
	a := <-first
	var b *Lease
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	second := make(chan *Lease, 1)
	go Run(ctxB, pool, key, opts, func(ctx context.Context, l *Lease) error { //nolint:errcheck
		second <- l
		<-ctx.Done()
		return nil
	})
	select {
	case b = <-second:
		t.Fatalf("second Run leads (owner %s, token %d) while the first does (owner %s)", b.Owner(), b.Token(), a.Owner())
	case <-time.After(opts.TTL + opts.Retry): // the first Run renews meanwhile
	}
	if !a.IsLeader() {
		t.Fatalf("first Run lost its lease: %s", a.Reason())
	}
	stopA()
	if err := <-doneA; !errors.Is(err, context.Canceled) {
		t.Fatalf("first Run returned %v", err)
	}
	if a.Reason() != ReasonShutdown || a.IsLeader() {
		t.Fatalf("first lease: reason %q, leader %v", a.Reason(), a.IsLeader())
	}
	select {
	case b = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("second Run never took over")
	}
	if b.Owner() == a.Owner() {
		t.Fatalf("same owner id in one process: %s", a.Owner())
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token did not rise on takeover: %d then %d", a.Token(), b.Token())
	}
}

// Local deadline (doc/client.md), G7: with the lease row locked from outside every renewal hangs; the
// work's context must be cancelled, and Lost closed, before the server's
// expiry; Run returns a LostError.
func TestHungRenewals(t *testing.T) {
	pool := testPool(t)
	key := testKey(t)
	opts := fastOpts()
	opts.StatementTimeout = 5 * time.Second // longer than the ttl: only the deadline bounds the attempts
	var cancelledAt, lostAt time.Time
	var reason string
	locker, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(context.Background()) //nolint:errcheck
	err = Run(context.Background(), pool, key, opts, func(ctx context.Context, l *Lease) error {
		if _, err := locker.Exec(ctx, "SELECT 1 FROM le_lease WHERE lease_key = $1 FOR UPDATE", key); err != nil {
			return err
		}
		select {
		case <-l.Lost():
			lostAt = time.Now()
		case <-time.After(3 * opts.TTL):
			return errors.New("Lost not closed")
		}
		<-ctx.Done()
		cancelledAt = time.Now()
		reason = l.Reason()
		return nil
	})
	if !errors.Is(err, ErrLost) {
		t.Fatalf("Run returned %v, want ErrLost", err)
	}
	if reason != ReasonDeadlinePassed {
		t.Fatalf("reason %q", reason)
	}
	_, _, exp := serverLease(t, pool, key) // the row lock does not block this read
	if !cancelledAt.Before(*exp) || !lostAt.Before(*exp) {
		t.Fatalf("work cancelled at %v, lost at %v, server expiry %v", cancelledAt, lostAt, exp)
	}
	t.Logf("cancelled %v before the server's expiry", exp.Sub(cancelledAt))
}

// G4: an administrator's force release makes the next renewal return NULL:
// Lost closes with reason renew_refused.
func TestRenewRefused(t *testing.T) {
	t.Parallel() // its own key; mostly waiting
	pool := testPool(t)
	key := testKey(t)
	err := Run(context.Background(), pool, key, fastOpts(), func(ctx context.Context, l *Lease) error {
		if _, err := pool.Exec(ctx, "SELECT le_force_release($1)", key); err != nil {
			return err
		}
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			return errors.New("Lost not closed")
		}
		if l.Reason() != ReasonRenewRefused || l.IsLeader() || ctx.Err() == nil {
			return fmt.Errorf("reason %q leader %v ctx %v", l.Reason(), l.IsLeader(), ctx.Err())
		}
		return nil
	})
	var le *LostError
	if !errors.As(err, &le) || le.Reason != ReasonRenewRefused {
		t.Fatalf("Run returned %v", err)
	}
}

// G5: Tx declares the token (a DELETE passes the fence only with it) and a
// holder's old token gets LE001 after a takeover.
func TestFencedTx(t *testing.T) {
	pool := testPool(t)
	key := testKey(t)
	table := "go_fenced_" + strconv.Itoa(os.Getpid())
	ctx := context.Background()
	for _, q := range []string{
		"DROP TABLE IF EXISTS " + table,
		"CREATE TABLE " + table + " (v text, fencing_token bigint NOT NULL)",
		"SELECT le_protect('" + table + "', '" + key + "')",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var old *Lease
	err := Run(ctx, pool, key, fastOpts(), func(ctx context.Context, l *Lease) error {
		old = l
		return l.Tx(ctx, pool, func(tx pgx.Tx) error {
			var declared string
			if err := tx.QueryRow(ctx, "SELECT current_setting('leader_election.fencing_token')").Scan(&declared); err != nil {
				return err
			}
			if declared != strconv.FormatInt(l.Token(), 10) {
				return fmt.Errorf("declared token %q, want %d", declared, l.Token())
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('a', $1), ('b', $1)", l.Token()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE v = 'b'") // needs the declared token
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var tok int64
	if err := pool.QueryRow(ctx, "SELECT count(*), max(fencing_token) FROM "+table).Scan(&n, &tok); err != nil || n != 1 || tok != old.Token() {
		t.Fatalf("rows %d token %d (%v), want 1 with %d", n, tok, err, old.Token())
	}
	err = Run(ctx, pool, key, fastOpts(), func(ctx context.Context, l *Lease) error {
		if l.Token() <= old.Token() {
			return fmt.Errorf("token %d after %d", l.Token(), old.Token())
		}
		err := old.Tx(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('stale', $1)", old.Token())
			return err
		})
		if !IsStale(err) || !errors.Is(err, ErrStale) || SQLState(err) != "LE001" {
			return fmt.Errorf("stale write: %v (SQLSTATE %q), want LE001", err, SQLState(err))
		}
		// the same, with fn ignoring the failed INSERT: the commit's error says LE001
		err = old.Tx(ctx, pool, func(tx pgx.Tx) error {
			tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('stale', $1)", old.Token()) //nolint:errcheck
			return nil
		})
		if !IsStale(err) {
			return fmt.Errorf("stale write ignored by fn: %v (SQLSTATE %q), want LE001", err, SQLState(err))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// released now: a write with the old token finds no holder
	err = old.Tx(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('late', $1)", old.Token())
		return err
	})
	if SQLState(err) != "LE001" && !errors.Is(err, ErrNotHeld) {
		t.Fatalf("write after release: %v", err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows after the rejected writes (%v)", n, err)
	}
}

// Local deadline (doc/client.md): ExitProcess ends a process whose work ignores its context before the
// server's expiry (run in a child process: this test binary, re-executed).
func TestExitProcess(t *testing.T) {
	if os.Getenv("LE_TEST_EXIT_CHILD") != "" {
		exitChild()
		return
	}
	pool := testPool(t)
	key := testKey(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestExitProcess$")
	cmd.Env = append(os.Environ(), "LE_TEST_EXIT_CHILD="+key)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if !strings.HasPrefix(line, "working token=") {
		cmd.Process.Kill() //nolint:errcheck
		t.Fatalf("child said %q (%v)", line, err)
	}
	// every renewal hangs from now on: the period ends, the work goes on
	locker, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(context.Background()) //nolint:errcheck
	if _, err := locker.Exec(context.Background(), "SELECT 1 FROM le_lease WHERE lease_key = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(stdout)
	err = cmd.Wait()
	exited := time.Now()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 71 {
		t.Fatalf("child: %v, output %q", err, rest)
	}
	if strings.Contains(string(rest), "returned") {
		t.Fatalf("child output %q", rest)
	}
	h, _, exp := serverLease(t, pool, key)
	if h == nil || !exited.Before(*exp) {
		t.Fatalf("child exited at %v, server expiry %v (holder %v)", exited, exp, h)
	}
	t.Logf("child gone %v before the server's expiry", exp.Sub(exited))
}

func exitChild() {
	key := os.Getenv("LE_TEST_EXIT_CHILD")
	pool, err := pgxpool.Connect(context.Background(), os.Getenv("LE_TEST_DSN"))
	if err != nil {
		os.Exit(3)
	}
	opts := fastOpts()
	opts.OnOverrun, opts.ExitCode = ExitProcess, 71
	Run(context.Background(), pool, key, opts, func(ctx context.Context, l *Lease) error { //nolint:errcheck
		fmt.Printf("working token=%d\n", l.Token())
		for { // ignores ctx, and the lease: only the process's end stops it
			time.Sleep(10 * time.Millisecond)
		}
	})
	fmt.Println("returned")
	os.Exit(0)
}

// G11: a follower that polls only every 30 s takes over at once when the
// leader releases: the release is announced to the key's watchers.
func TestReleaseWakesFollower(t *testing.T) {
	pool := testPool(t)
	key := testKey(t)
	ctxA, stopA := context.WithCancel(context.Background())
	first := make(chan *Lease, 1)
	doneA := make(chan error, 1)
	go func() {
		doneA <- Run(ctxA, pool, key, fastOpts(), func(ctx context.Context, l *Lease) error {
			first <- l
			<-ctx.Done()
			return nil
		})
	}()
	a := <-first
	slow := fastOpts()
	slow.Retry = 30 * time.Second
	ctxB, stopB := context.WithCancel(context.Background())
	defer stopB()
	second := make(chan *Lease, 1)
	go Run(ctxB, pool, key, slow, func(ctx context.Context, l *Lease) error { //nolint:errcheck
		second <- l
		<-ctx.Done()
		return nil
	})
	// wait until A renewed (its connection's last statement is le_renew)
	// and B's first le_acquire was refused (the other one's is le_acquire;
	// against 1.1 it is waiting in the server, active)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ready bool
		if err := pool.QueryRow(context.Background(), `
			SELECT count(*) FILTER (WHERE query LIKE '%le_renew(%') = 1
			   AND count(*) FILTER (WHERE query LIKE '%le_acquire(%') = 1
			  FROM pg_stat_activity WHERE application_name = $1 AND state IN ('idle', 'active')
			   AND (state = 'idle' OR query LIKE '%le_acquire(%')`,
			ApplicationName).Scan(&ready); err != nil {
			t.Fatal(err)
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower never campaigned")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopA()
	<-doneA
	released := time.Now()
	select {
	case b := <-second:
		if b.Token() <= a.Token() {
			t.Fatalf("token %d after %d", b.Token(), a.Token())
		}
		t.Logf("follower led %v after the release (its poll interval: %v)", time.Since(released), slow.Retry)
	case <-time.After(slow.Retry / 3):
		t.Fatal("the follower waited for its poll: the release did not wake it")
	}
}

// Bad input: typed errors (SQLSTATE 22023); the ttl is whole milliseconds
// for the local deadline as for the server; no margin below 25 ms.
func TestOptionsChecks(t *testing.T) {
	o, err := Options{TTL: 1500*time.Millisecond + 999*time.Microsecond}.resolve("k")
	if err != nil || o.TTL != 1500*time.Millisecond {
		t.Fatalf("ttl %v, %v", o.TTL, err)
	}
	for _, bad := range []Options{{Margin: time.Nanosecond}, {Margin: 24 * time.Millisecond},
		{ExitCode: 256}, {ExitCode: -1}, {TTL: time.Millisecond}, {Name: "a\x00b"}, {Retry: time.Nanosecond},
		{Margin: -1}} {
		if _, err := bad.resolve("k"); SQLState(err) != "22023" {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	for _, key := range []string{"", "a\x00b", strings.Repeat("k", 201)} {
		if _, err := (Options{}).resolve(key); SQLState(err) != "22023" {
			t.Errorf("key %q: %v", key, err)
		}
	}
}

// G4: the work's context is done only after the period ended: a work that
// sees Run's cancellation sees IsLeader false with reason shutdown.
func TestShutdownEndsPeriodFirst(t *testing.T) {
	pool := testPool(t)
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		err := Run(ctx, pool, testKey(t), fastOpts(), func(wctx context.Context, l *Lease) error {
			go cancel()
			<-wctx.Done()
			if l.IsLeader() || l.Reason() != ReasonShutdown {
				return fmt.Errorf("context done while leader %v reason %q", l.IsLeader(), l.Reason())
			}
			return nil
		})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("attempt %d: Run returned %v", i, err)
		}
	}
}

// With Recampaign, a work error that wraps a context error of the work's
// own (its period's context not cancelled) ends Run with that error.
func TestRecampaignWorkContextError(t *testing.T) {
	pool := testPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := fastOpts()
	opts.Recampaign = true
	err := Run(ctx, pool, testKey(t), opts, func(wctx context.Context, l *Lease) error {
		qctx, qcancel := context.WithTimeout(wctx, time.Millisecond)
		defer qcancel()
		<-qctx.Done()
		return fmt.Errorf("own query: %w", qctx.Err())
	})
	if err == nil || !strings.HasPrefix(err.Error(), "own query") {
		t.Fatalf("Run returned %v", err)
	}
}

// A permanent connection error (no such database, 3D000) ends Run at once.
func TestPermanentConnectError(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(os.Getenv("LE_TEST_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Database = "le_no_such_database"
	cfg.LazyConnect = true
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Run(ctx, pool, testKey(t), fastOpts(), func(context.Context, *Lease) error { return nil })
	if SQLState(err) != "3D000" || ctx.Err() != nil {
		t.Fatalf("Run returned %v", err)
	}
}

// G4: a panic in the work ends the period and releases the lease before it
// goes on (and ends the process: run in a child process).
func TestPanicReleases(t *testing.T) {
	if key := os.Getenv("LE_TEST_PANIC_CHILD"); key != "" {
		pool, err := pgxpool.Connect(context.Background(), os.Getenv("LE_TEST_DSN"))
		if err != nil {
			os.Exit(3)
		}
		Run(context.Background(), pool, key, fastOpts(), func(ctx context.Context, l *Lease) error { //nolint:errcheck
			panic("work panicked")
		})
		os.Exit(0)
	}
	pool := testPool(t)
	key := testKey(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanicReleases$")
	cmd.Env = append(os.Environ(), "LE_TEST_PANIC_CHILD="+key)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "panic: work panicked") {
		t.Fatalf("child: %v, output %q", err, out)
	}
	var reason string
	if err := pool.QueryRow(context.Background(),
		"SELECT end_reason FROM le_lease_history WHERE lease_key = $1", key).Scan(&reason); err != nil || reason != "released" {
		t.Fatalf("history: %q %v (output %q)", reason, err, out)
	}
	if h, _, _ := serverLease(t, pool, key); h != nil {
		t.Fatalf("still held by %s", *h)
	}
}

// G4 with the extension in a schema of its own, off the search_path: Run
// leads, renews and releases.
func TestExtensionSchema(t *testing.T) {
	t.Parallel() // its own key; mostly waiting
	dsn := os.Getenv("LE_TEST_SCHEMA_DSN")
	if dsn == "" {
		t.Fatal("LE_TEST_SCHEMA_DSN is not set (run through test/t/141_go_client.pl)")
	}
	pool, err := pgxpool.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	key := testKey(t)
	err = Run(context.Background(), pool, key, fastOpts(), func(ctx context.Context, l *Lease) error {
		time.Sleep(1500 * time.Millisecond) // past several renewals
		if !l.IsLeader() {
			return fmt.Errorf("not leader: %s", l.Reason())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run returned %v", err)
	}
	var reason string
	if err := pool.QueryRow(context.Background(),
		`SELECT end_reason FROM "le schema".le_lease_history WHERE lease_key = $1`, key).Scan(&reason); err != nil || reason != "released" {
		t.Fatalf("history: %q %v", reason, err)
	}
}

// G4: a function named le_renew earlier on the search_path (always
// "renewed") does not hide a force release from the leader.
func TestShadowedFunctions(t *testing.T) {
	t.Parallel() // its own key; mostly waiting
	pool := testPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS shadow;
		CREATE OR REPLACE FUNCTION shadow.le_renew(text, text, bigint, interval) RETURNS timestamptz
		    LANGUAGE sql AS 'SELECT pg_catalog.now()';
		GRANT USAGE ON SCHEMA shadow TO PUBLIC`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv("LE_TEST_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "shadow, public"
	spool, err := pgxpool.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	key := testKey(t)
	err = Run(ctx, spool, key, fastOpts(), func(wctx context.Context, l *Lease) error {
		if _, err := pool.Exec(wctx, "SELECT le_force_release($1)", key); err != nil {
			return err
		}
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			return errors.New("Lost not closed")
		}
		return nil
	})
	var le *LostError
	if !errors.As(err, &le) || le.Reason != ReasonRenewRefused {
		t.Fatalf("Run returned %v", err)
	}
}

// G1, G4, G5 through PgBouncer in transaction mode (LE_TEST_BOUNCER_DSN):
// Run leads (no startup parameter PgBouncer refuses), renews past the ttl,
// a fenced transaction commits, and the lease is released.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel() // its own key; mostly waiting
	dsn := os.Getenv("LE_TEST_BOUNCER_DSN")
	if dsn == "" {
		t.Fatal("LE_TEST_BOUNCER_DSN is not set (run through test/t/141_go_client.pl)")
	}
	pool, err := pgxpool.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	direct := testPool(t)
	if _, err := direct.Exec(context.Background(), "CREATE TABLE IF NOT EXISTS bouncer_writes (fencing_token bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	key := testKey(t)
	if _, err := direct.Exec(context.Background(), "SELECT le_protect('bouncer_writes', $1)", key); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = Run(ctx, pool, key, fastOpts(), func(wctx context.Context, l *Lease) error {
		time.Sleep(2500 * time.Millisecond) // longer than the ttl: renewals went through
		if !l.IsLeader() {
			return fmt.Errorf("not leader: %s", l.Reason())
		}
		return l.Tx(wctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(wctx, "INSERT INTO bouncer_writes VALUES ($1)", l.Token())
			return err
		})
	})
	if err != nil {
		t.Fatalf("Run returned %v", err)
	}
	var reason string
	if err := direct.QueryRow(context.Background(),
		"SELECT h.end_reason FROM le_lease_history h JOIN bouncer_writes w USING (fencing_token) WHERE h.lease_key = $1",
		key).Scan(&reason); err != nil || reason != "released" {
		t.Fatalf("history: %q %v", reason, err)
	}
}

// G4 with a connection configuration that turns standard_conforming_strings
// off: Run's own connection still leads and releases.
func TestNonStandardStrings(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(os.Getenv("LE_TEST_DSN"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["standard_conforming_strings"] = "off"
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := testKey(t) + `\'`
	led := false
	err = Run(ctx, pool, key, fastOpts(), func(context.Context, *Lease) error { led = true; return nil })
	if err != nil || !led {
		t.Fatalf("Run returned %v (led %v)", err, led)
	}
	if h, _, _ := serverLease(t, testPool(t), key); h != nil {
		t.Fatalf("still held by %s", *h)
	}
}

// G9: a Run whose ctx ends while its first le_acquire is in flight leaves
// no grant behind on the server (one would block others for the ttl).
func TestCancelDuringAcquire(t *testing.T) {
	pool := testPool(t)
	left := 0
	for i := 0; i < 60; i++ {
		key := testKey(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%40)*250*time.Microsecond+2*time.Millisecond)
		opts := fastOpts()
		opts.TTL = 30 * time.Second
		Run(ctx, pool, key, opts, func(context.Context, *Lease) error { return nil }) //nolint:errcheck
		cancel()
		var held bool
		if err := pool.QueryRow(context.Background(),
			"SELECT pg_catalog.count(*) > 0 FROM le_leases WHERE lease_key = $1 AND holder IS NOT NULL", key).Scan(&held); err != nil {
			t.Fatal(err)
		}
		if held {
			left++
		}
	}
	if left > 0 {
		t.Fatalf("%d of 60 Runs returned with the lease still held", left)
	}
}

// hasServerWait reports whether the server has the 1.1 le_acquire (a wait
// in the server, metadata).
func testHasServerWait(t *testing.T, pool *pgxpool.Pool) bool {
	t.Helper()
	var has bool
	if err := pool.QueryRow(context.Background(), `
		SELECT to_regprocedure(quote_ident(n.nspname) || '.le_acquire(text,text,interval,interval,jsonb)') IS NOT NULL
		  FROM pg_extension x JOIN pg_namespace n ON n.oid = x.extnamespace WHERE x.extname = 'leader_election'`).
		Scan(&has); err != nil {
		t.Fatal(err)
	}
	return has
}

const noServerWait = "SKIP: this server's leader_election has no le_acquire(text,text,interval,interval,jsonb)" +
	" (extension 1.1): the server-side wait and metadata checks do not run"

// Against 1.0: Options.Metadata ends Run with 42883 (the campaign itself
// polls and LISTENs: the other tests). Against 1.1 (G5, G13): a crashed
// holder's lease is taken at its expiry by the server-side wait, not at the
// next poll; metadata is published with the lease and changed only with
// the current token (LE002 after the release, LE001 after a takeover).
func TestServerWaitAndMetadata(t *testing.T) {
	t.Parallel()
	pool := testPool(t)
	key := testKey(t)
	o := fastOpts()
	o.Metadata = json.RawMessage(`{"addr": "10.0.0.5:8080"}`)
	if !testHasServerWait(t, pool) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := Run(ctx, pool, key, o, func(ctx context.Context, l *Lease) error { return nil })
		if SQLState(err) != "42883" {
			t.Fatalf("metadata against 1.0: %v, want 42883", err)
		}
		t.Log(noServerWait)
		t.Skip(noServerWait)
	}
	meta := func() (m *string) {
		if err := pool.QueryRow(context.Background(), "SELECT metadata::text FROM le_leases WHERE lease_key = $1", key).
			Scan(&m); err != nil {
			t.Fatal(err)
		}
		return
	}
	var first *Lease
	err := Run(context.Background(), pool, key, o, func(ctx context.Context, l *Lease) error {
		first = l
		if m := meta(); m == nil || *m != `{"addr": "10.0.0.5:8080"}` {
			t.Errorf("published metadata %v", m)
		}
		if err := l.SetMetadata(ctx, map[string]string{"addr": "10.0.0.6:8080"}); err != nil {
			return err
		}
		if m := meta(); m == nil || *m != `{"addr": "10.0.0.6:8080"}` {
			t.Errorf("metadata after SetMetadata %v", m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.SetMetadata(context.Background(), "late"); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("SetMetadata after the release: %v, want LE002", err)
	}
	// a crashed holder: taken at its expiry, not at the follower's next poll
	var expires time.Time
	if err := pool.QueryRow(context.Background(), "SELECT expires_at FROM le_acquire($1, 'crashed', '1 second')", key).
		Scan(&expires); err != nil {
		t.Fatal(err)
	}
	slow := fastOpts()
	slow.Retry = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = Run(ctx, pool, key, slow, func(ctx context.Context, l *Lease) error {
		var now time.Time
		if err := pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			return err
		}
		gap := now.Sub(expires)
		t.Logf("server-side wait: crash takeover %v after the expiry (poll interval %v)", gap, slow.Retry)
		// a poll would come 4 to 6 s after the first refusal, at least 3 s after the expiry
		if gap > 2500*time.Millisecond {
			t.Errorf("taken %v after the expiry: the follower waited for its poll", gap)
		}
		if err := first.SetMetadata(ctx, "late"); !errors.Is(err, ErrStale) {
			t.Errorf("SetMetadata with the old token: %v, want LE001", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
