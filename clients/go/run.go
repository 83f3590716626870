// Run: campaign for a lease, run the work function while leading, renew on
// a dedicated connection, release when the work returns.
//
// One invariant: the work function runs only inside a period this Run was
// granted, its context is cancelled at the period's stop point at the
// latest (before the local deadline, itself at least Margin before the
// server's expiry), and a token is released and never led on again once
// its period ended.

package leaderelection

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Func is the work of one period: it should return soon after ctx is done.
type Func func(ctx context.Context, l *Lease) error

// ApplicationName is the application_name of Run's own connection.
const ApplicationName = "leaderelection renew"

type elector struct {
	key, owner string
	o          Options
	cfg        *pgx.ConnConfig
	conn       *pgx.Conn // campaign and renewal connection, never from the pool
	rnd        *rand.Rand
	lastToken  int64 // token of the last period, never led on again
	unknown    bool  // an acquire whose outcome we do not know was sent
	lastWake   time.Time
	schema     string // the extension's schema, quoted, for the current connection
	pool       *pgxpool.Pool
	serverWait bool // the current connection's server has the 1.1 le_acquire (wait, metadata)
}

// hasServerWait asks once per connection whether le_acquire can wait in the
// server and publish metadata (extension 1.1).
const hasServerWait = "SELECT pg_catalog.to_regprocedure($1) IS NOT NULL"

// errNoMetadata: Options.Metadata against a server without extension 1.1.
var errNoMetadata = &Error{SQLState: "42883",
	Err: errors.New("leaderelection: metadata needs extension leader_election 1.1 (ALTER EXTENSION leader_election UPDATE)")}

// serverWaitFor is the longest wait in the server of one le_acquire: at
// most Retry, a quarter of the ttl (a period is counted from the moment the
// call was sent, so a grant late in the wait shortens it by up to this),
// half the statement timeout, 1 s, and what is left of ctx's deadline.
func (e *elector) serverWaitFor(ctx context.Context) time.Duration {
	w := e.o.Retry
	for _, b := range []time.Duration{e.o.TTL / 4, e.o.StatementTimeout / 2, time.Second} {
		if w > b {
			w = b
		}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < w {
		w = time.Until(dl)
	}
	if w < 0 {
		w = 0
	}
	return w.Truncate(time.Millisecond)
}

// extensionSchema is the schema leader_election is installed in.
const extensionSchema = "SELECT n.nspname FROM pg_catalog.pg_extension x" +
	" JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) x.extnamespace" +
	" WHERE x.extname OPERATOR(pg_catalog.=) 'leader_election'"

// errNoExtension: the database has no leader_election extension.
var errNoExtension = &Error{SQLState: "42883",
	Err: errors.New("leaderelection: extension leader_election is not installed in this database")}

// Run campaigns for key until it leads or ctx is done, then runs fn with a
// context that is cancelled at the period's stop point at the latest. It
// renews on a connection of its own, opened with pool's configuration (not
// taken from the pool: work that holds every pooled connection cannot delay
// a renewal, and a hung renewal's connection is closed, not returned).
// When fn returns, Run releases the lease (compare-and-release with the
// token). Without opts.Recampaign it then returns fn's error, or a
// *LostError when the period ended before fn returned, or nil; with it, it
// campaigns again (after a retry interval when fn returned by itself) and
// returns only when ctx is done or fn returned an error (other than its
// period's context error) while leading. A panic in fn ends the period,
// releases the lease and goes on in Run's goroutine. Bad input, missing
// privileges, a missing database or extension end Run with an *Error
// (SQLSTATE class 22, 28 or 42, or 3D000).
func Run(ctx context.Context, pool *pgxpool.Pool, key string, opts Options, fn Func) error {
	o, err := opts.resolve(key)
	if err != nil {
		return err
	}
	cfg := pool.Config().ConnConfig
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	// no statement_timeout among the startup parameters: PgBouncer refuses
	// it. Each statement is bounded by its context instead, and pgx sends
	// the server a cancel request when that context ends.
	cfg.RuntimeParams["application_name"] = ApplicationName
	// no prepared statements either: they do not survive PgBouncer's
	// transaction pooling (arguments are sent as escaped literals)
	cfg.PreferSimpleProtocol, cfg.BuildStatementCache = true, nil
	// which pgx allows only with standard strings (PgBouncer accepts this one)
	cfg.RuntimeParams["standard_conforming_strings"] = "on"
	var seed [8]byte
	cryptorand.Read(seed[:]) //nolint:errcheck // a zero seed still works
	e := &elector{key: key, owner: newOwnerID(o.Name), o: o, cfg: cfg, pool: pool,
		rnd: rand.New(rand.NewSource(int64(binary.BigEndian.Uint64(seed[:]))))}
	defer e.closeConn()
	for {
		l, err := e.campaign(ctx)
		if err != nil {
			return err
		}
		ferr, cancelled := e.lead(ctx, l, fn)
		reason := l.Reason()
		switch {
		case ferr != nil && !(cancelled && (errors.Is(ferr, context.Canceled) || errors.Is(ferr, context.DeadlineExceeded))):
			// an error of the work's own, not the end of its period's context
			return ferr
		case ctx.Err() != nil:
			return ctx.Err()
		case !o.Recampaign && reason == ReasonReturned:
			return ferr
		case !o.Recampaign:
			return &LostError{Reason: reason}
		case reason == ReasonReturned:
			if !sleep(ctx, e.retry()) {
				return ctx.Err()
			}
		}
	}
}

// the ttl parameter ($3, $4) in milliseconds as an interval
const (
	msInterval  = "$3::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 millisecond'::pg_catalog.interval"
	msInterval4 = "$4::pg_catalog.int8 OPERATOR(pg_catalog.*) '1 millisecond'::pg_catalog.interval"
)

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (e *elector) retry() time.Duration {
	return time.Duration(float64(e.o.Retry) * (1 + e.o.Jitter*(2*e.rnd.Float64()-1)))
}

func (e *elector) closeConn() {
	if e.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		e.conn.Close(ctx) //nolint:errcheck
		cancel()
		e.conn = nil
	}
}

// query runs one statement on Run's connection within timeout; a failure
// other than a server error abandons the connection.
func (e *elector) query(ctx context.Context, timeout time.Duration, sql string, args []interface{}, dest ...interface{}) error {
	qctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := e.connect(qctx); err != nil {
		return err
	}
	if strings.Contains(sql, "@.le_acquire(") && e.serverWait {
		// the 1.1 form: $4 the wait in milliseconds, $5 the metadata
		sql = strings.Replace(sql, msInterval+")", msInterval+", "+msInterval4+", $5::pg_catalog.jsonb)", 1)
	} else if strings.Contains(sql, "@.le_acquire(") {
		if e.o.Metadata != nil {
			return errNoMetadata
		}
		args = args[:3]
	}
	// own objects in the extension's schema, whatever the search_path
	sql = strings.ReplaceAll(sql, "@.", e.schema+".")
	err := e.conn.QueryRow(qctx, sql, args...).Scan(dest...)
	var pe *pgconn.PgError
	if err != nil && (!errors.As(err, &pe) || e.conn.IsClosed()) {
		e.closeConn()
	}
	return err
}

// connect opens Run's connection if there is none, within qctx: it looks up
// the extension's schema and whether le_acquire waits in the server (1.1),
// and against 1.0 sets up LISTEN and le_watch for wake-ups.
func (e *elector) connect(qctx context.Context) error {
	if e.conn != nil {
		return nil
	}
	c, err := pgx.ConnectConfig(qctx, e.cfg)
	if err != nil {
		return err
	}
	var schema string
	if err := c.QueryRow(qctx, extensionSchema).Scan(&schema); err != nil {
		c.Close(context.Background()) //nolint:errcheck
		if errors.Is(err, pgx.ErrNoRows) {
			return errNoExtension
		}
		return err
	}
	e.conn, e.schema = c, pgx.Identifier{schema}.Sanitize()
	if err := c.QueryRow(qctx, hasServerWait, e.schema+".le_acquire(text,text,interval,interval,jsonb)").
		Scan(&e.serverWait); err != nil {
		e.closeConn()
		return err
	}
	// 1.0: wake-ups, releases of a watched lease are announced (best
	// effort: without them, campaigns poll every retry interval); 1.1
	// waits in the server instead
	if !e.serverWait {
		if _, err := c.Exec(qctx, "LISTEN leader_election"); err == nil {
			c.Exec(qctx, "SELECT "+e.schema+".le_watch($1)", e.key) //nolint:errcheck
		}
	}
	if c.IsClosed() {
		e.conn = nil
		return errors.New("leaderelection: connection closed while setting up LISTEN")
	}
	return nil
}

// wait sleeps d, or less when a release of our key is announced (then
// after 0-10 ms of random spread). Payloads are hints only: anyone may
// NOTIFY, so a wake-up costs at most one early le_acquire per 100 ms.
func (e *elector) wait(ctx context.Context, d time.Duration) bool {
	end := time.Now().Add(d)
	for e.conn != nil {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		wctx, cancel := context.WithTimeout(ctx, left)
		n, err := e.conn.WaitForNotification(wctx)
		cancel()
		if ctx.Err() != nil {
			return false
		}
		if err != nil && n == nil {
			if e.conn.IsClosed() {
				e.closeConn()
			}
			if time.Now().Before(end) && e.conn != nil {
				continue
			}
			break
		}
		if n != nil && e.released(n.Payload) && time.Since(e.lastWake) >= 100*time.Millisecond {
			e.lastWake = time.Now()
			return sleep(ctx, time.Duration(e.rnd.Int63n(int64(10*time.Millisecond))))
		}
	}
	return sleep(ctx, time.Until(end))
}

func (e *elector) released(payload string) bool {
	var p struct {
		Event    string `json:"event"`
		LeaseKey string `json:"lease_key"`
	}
	if len(payload) > 8000 || json.Unmarshal([]byte(payload), &p) != nil {
		return false
	}
	return p.LeaseKey == e.key && (p.Event == "released" || p.Event == "force_released")
}

// drain drops the notifications buffered while leading (they carry nothing
// a leader needs; only le_renew's answer ends a period).
func (e *elector) drain() {
	if e.conn == nil {
		return
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for {
		if n, _ := e.conn.WaitForNotification(done); n == nil {
			return
		}
	}
}

func permanent(err error) bool {
	c := SQLState(err)
	return strings.HasPrefix(c, "22") || strings.HasPrefix(c, "28") || strings.HasPrefix(c, "42") ||
		c == "3D000"
}

// campaign calls le_acquire every retry interval until granted a new
// period (returned with its deadline set) or ctx is done.
func (e *elector) campaign(ctx context.Context) (*Lease, error) {
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var acquired, newPeriod *bool
		var token *int64
		// against 1.1 the call waits in the server (query adds $4, $5);
		// the connection is made first so that query knows which
		var meta *string
		if e.o.Metadata != nil {
			s := string(e.o.Metadata)
			meta = &s
		}
		sent := time.Now()
		var sw time.Duration
		cctx, cancel := context.WithTimeout(ctx, e.o.StatementTimeout)
		err := e.connect(cctx)
		cancel()
		if err == nil {
			if e.serverWait {
				sw = e.serverWaitFor(ctx)
			}
			err = e.query(ctx, e.o.StatementTimeout+sw,
				"SELECT acquired, fencing_token, new_period FROM @.le_acquire($1, $2, "+msInterval+")",
				[]interface{}{e.key, e.owner, e.o.TTL.Milliseconds(), sw.Milliseconds(), meta},
				&acquired, &token, &newPeriod)
		}
		waited := err == nil && e.serverWait && sw > 0
		wait := e.retry()
		switch {
		case err != nil && ctx.Err() != nil:
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				e.abandon() // the acquire may have been granted after all
			}
			return nil, ctx.Err()
		case err != nil && permanent(err):
			return nil, wrap(err)
		case err != nil:
			var pe *pgconn.PgError
			e.unknown = e.unknown || !errors.As(err, &pe) // a reply lost: it may have been granted
		case acquired == nil || !*acquired:
			e.unknown = false
			if waited {
				wait = 0 // after a wait in the server the next call follows at once
			}
		case token == nil:
			e.unknown = false // not a reply le_acquire gives; try again later
		case *token == e.lastToken:
			// still ours from a period that ended here: never lead on it again
			e.unknown = false
			e.release(*token)
			wait = e.retry() / 20
		case newPeriod != nil && !*newPeriod && !e.unknown:
			// granted as "already yours" though we never held it: another
			// process shares our owner id; neither lead on it nor release it
			wait = e.o.TTL
		default:
			e.unknown = false
			l := &Lease{key: e.key, owner: e.owner, token: *token, grace: e.o.Grace, pool: e.pool, schema: e.schema,
				deadline: sent.Add(e.o.TTL - e.o.Margin), lost: make(chan struct{})}
			if !time.Now().Before(l.deadline.Add(-e.o.Grace)) {
				e.lastToken = l.token // the reply came too late to lead on
				e.release(l.token)
				wait = e.retry() / 20
				break
			}
			return l, nil
		}
		if !e.wait(ctx, wait) {
			return nil, ctx.Err()
		}
	}
}

// lead runs fn for the period l, renews it until it ends, waits for fn and
// releases. It returns fn's error and whether the period's context was
// already cancelled when fn returned. A panic in fn ends the period, the
// lease is released, and the panic goes on in the caller's goroutine.
func (e *elector) lead(ctx context.Context, l *Lease, fn Func) (error, bool) {
	e.lastToken = l.token
	// the work's context carries ctx's values but not its cancellation:
	// Run's end first ends the period (IsLeader false), then cancels it
	wctx, cancel := context.WithCancel(valuesOnly{ctx})
	l.mu.Lock()
	l.cancel = cancel
	l.armStop()
	l.mu.Unlock()
	var exitMu sync.Mutex
	returned := false
	var exit *time.Timer
	if e.o.OnOverrun == ExitProcess {
		exit = e.armExit(l, &exitMu, &returned)
	}
	type result struct {
		err       error
		cancelled bool
		panicked  interface{}
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			if p := recover(); p != nil {
				r = result{panicked: p, cancelled: wctx.Err() != nil}
			}
			exitMu.Lock()
			returned = true
			exitMu.Unlock()
			done <- r
		}()
		err := fn(wctx, l)
		r = result{err: err, cancelled: wctx.Err() != nil}
	}()
	var res result
	fnDone := false
	next := time.NewTimer(e.o.Renew)
loop:
	for {
		select {
		case res = <-done:
			fnDone = true
			l.end(ReasonReturned)
			break loop
		case <-ctx.Done():
			l.end(ReasonShutdown)
			break loop
		case <-l.Lost():
			break loop
		case <-next.C:
			next.Reset(e.renew(ctx, l))
			e.drain()
		}
	}
	next.Stop()
	if !fnDone {
		res = <-done
	}
	if exit != nil {
		exit.Stop()
	}
	cancel()
	e.release(l.token)
	if res.panicked != nil {
		e.closeConn()
		panic(res.panicked)
	}
	return res.err, res.cancelled
}

// valuesOnly is a context with the values of its parent and no deadline or
// cancellation.
type valuesOnly struct{ context.Context }

func (valuesOnly) Deadline() (time.Time, bool) { return time.Time{}, false }
func (valuesOnly) Done() <-chan struct{}       { return nil }
func (valuesOnly) Err() error                  { return nil }

// armExit: in ExitProcess mode, end the process at the local deadline if
// fn has not returned by then.
func (e *elector) armExit(l *Lease, mu *sync.Mutex, returned *bool) *time.Timer {
	var t *time.Timer
	var check func()
	check = func() {
		mu.Lock()
		defer mu.Unlock()
		if *returned {
			return
		}
		if left := time.Until(l.Deadline()); left > 0 {
			t.Reset(left) // renewed meanwhile
			return
		}
		fmt.Fprintf(os.Stderr, "leaderelection: work for key %q token %d did not return by the deadline; exiting with %d\n",
			l.key, l.token, e.o.ExitCode)
		os.Exit(e.o.ExitCode)
	}
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(time.Until(l.Deadline()), check)
	return t
}

// renew makes one renewal attempt and returns the wait before the next.
// An attempt gets at most half the time left before the stop point, so a
// hung one leaves room for another on a new connection.
func (e *elector) renew(ctx context.Context, l *Lease) time.Duration {
	left := time.Until(l.Deadline().Add(-e.o.Grace))
	if left <= 0 {
		return e.o.Renew
	}
	timeout := left / 2
	if timeout > e.o.StatementTimeout {
		timeout = e.o.StatementTimeout
	}
	if timeout < 10*time.Millisecond {
		timeout = left
	}
	var renewed bool
	sent := time.Now()
	err := e.query(ctx, timeout,
		"SELECT @.le_renew($1, $2, $3::pg_catalog.int8, "+msInterval4+") IS NOT NULL",
		[]interface{}{e.key, e.owner, l.token, e.o.TTL.Milliseconds()}, &renewed)
	switch {
	case err == nil && !renewed:
		l.end(ReasonRenewRefused)
	case err == nil && l.extend(sent.Add(e.o.TTL-e.o.Margin)):
		return e.o.Renew
	}
	wait := e.o.Renew / 4
	if wait > 200*time.Millisecond {
		wait = 200 * time.Millisecond
	}
	if q := time.Until(l.Deadline().Add(-e.o.Grace)) / 4; q < wait {
		wait = q
	}
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	return wait
}

// abandon: best-effort release of whatever period this Run's owner id may
// hold on the key, after an acquire whose reply was lost as Run ended.
func (e *elector) abandon() {
	timeout := e.o.StatementTimeout
	if timeout > time.Second {
		timeout = time.Second
	}
	var n int64
	e.query(context.Background(), timeout, //nolint:errcheck
		"SELECT pg_catalog.count(@.le_release(l.lease_key, l.holder, l.fencing_token)) FROM @.le_leases l"+
			" WHERE l.lease_key OPERATOR(pg_catalog.=) $1 AND l.holder OPERATOR(pg_catalog.=) $2",
		[]interface{}{e.key, e.owner}, &n)
}

// release: compare-and-release of token, best effort (a failed release
// leaves the lease to expire; the token is never led on again).
func (e *elector) release(token int64) {
	var ok bool
	e.query(context.Background(), e.o.StatementTimeout, //nolint:errcheck
		"SELECT @.le_release($1, $2, $3::pg_catalog.int8)", []interface{}{e.key, e.owner, token}, &ok)
}
