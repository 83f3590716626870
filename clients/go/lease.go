// Lease: one ownership period as the work function sees it (token, local
// deadline, loss), the fenced-transaction helper, and the errors with their
// SQLSTATEs.
//
// One invariant: a Lease reports leadership only before its stop point, read
// from Go's monotonic clock at each call, and once it ended it never leads
// again (its token is not used for another period by this process).

package leaderelection

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Errors of the package. Fenced writes fail with an *Error carrying the
// SQLSTATE; errors.Is(err, ErrStale) holds for LE001, ErrNotHeld for LE002.
var (
	ErrStale         = errors.New("leaderelection: stale fencing token (LE001)")
	ErrNotHeld       = errors.New("leaderelection: lease not held (LE002)")
	ErrLost          = errors.New("leaderelection: leadership ended before the work returned")
	ErrOwnerConflict = errors.New("leaderelection: another process uses this owner id")
)

// Error is a database error met by Run or Lease.Tx, with its SQLSTATE.
type Error struct {
	SQLState string
	Err      error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStale) and errors.Is(err, ErrNotHeld) work.
func (e *Error) Is(target error) bool {
	return (target == ErrStale && e.SQLState == "LE001") ||
		(target == ErrNotHeld && e.SQLState == "LE002")
}

// SQLState returns the SQLSTATE of a server error in err's chain, else "".
func SQLState(err error) string {
	var le *Error
	if errors.As(err, &le) {
		return le.SQLState
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// IsStale reports whether err is a fenced write rejected with LE001.
func IsStale(err error) bool { return SQLState(err) == "LE001" }

// wrap gives a server error its SQLSTATE; other errors pass unchanged.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var le *Error
	if errors.As(err, &le) {
		return err
	}
	if code := SQLState(err); code != "" {
		return &Error{SQLState: code, Err: err}
	}
	return err
}

// LostError is what Run returns (without Recampaign) when the period ended
// before the work function returned; errors.Is(err, ErrLost) holds.
type LostError struct{ Reason string }

func (e *LostError) Error() string        { return ErrLost.Error() + ": " + e.Reason }
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Reasons a period ends (Lease.Reason).
const (
	ReasonRenewRefused   = "renew_refused"   // le_renew returned NULL: the lease is not ours any more
	ReasonDeadlinePassed = "deadline_passed" // no renewal confirmed in time: the stop point came
	ReasonShutdown       = "shutdown"        // Run's context ended
	ReasonReturned       = "returned"        // the work function returned
)

// Lease is one ownership period. Its methods are safe for concurrent use.
type Lease struct {
	key, owner string
	token      int64
	grace      time.Duration

	mu       sync.Mutex
	deadline time.Time // local deadline: send time of the last confirmed acquire/renew + ttl - margin
	ended    bool
	reason   string
	lost     chan struct{}
	cancel   context.CancelFunc
	stop     *time.Timer // ends the period at the stop point

	pool   *pgxpool.Pool // SetMetadata runs on it
	schema string        // the extension's schema, quoted
}

// SetMetadata publishes v (marshalled with encoding/json; a
// json.RawMessage as it is; nil clears it) with the lease
// (le_leases.metadata, extension 1.1), compare-and-set with this period's
// owner id and token, on a connection of Run's pool, bounded by ctx. It
// fails with an *Error: LE001 (errors.Is(err, ErrStale)) when the lease has
// a newer token, LE002 (ErrNotHeld) when it is released or expired, 42883
// against a server without extension 1.1.
func (l *Lease) SetMetadata(ctx context.Context, v interface{}) error {
	var meta *string
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return inputError("leaderelection: metadata: %v", err)
		}
		s := string(b)
		meta = &s
	}
	if l.pool == nil {
		return errors.New("leaderelection: SetMetadata of a Lease not granted by Run")
	}
	_, err := l.pool.Exec(ctx, "SELECT "+l.schema+".le_set_metadata($1, $2, $3::pg_catalog.int8, $4::pg_catalog.jsonb)",
		l.key, l.owner, strconv.FormatInt(l.token, 10), meta)
	return wrap(err)
}

// Key is the lease key.
func (l *Lease) Key() string { return l.key }

// Owner is the owner id this period was granted to.
func (l *Lease) Owner() string { return l.owner }

// Token is the period's fencing token.
func (l *Lease) Token() int64 { return l.token }

// Deadline is the local deadline: the monotonic time the last confirmed
// acquire or renewal was sent, plus ttl minus margin. The server's expiry
// is at least Margin later.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// IsLeader is true while the period has not ended and the stop point
// (Deadline - Grace) has not come, by the clock read now.
func (l *Lease) IsLeader() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.ended && time.Now().Before(l.deadline.Add(-l.grace))
}

// Lost is closed when the period ends, for any reason.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Reason says why the period ended ("" while it lasts).
func (l *Lease) Reason() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reason
}

// end ends the period once: cancels the work's context, closes Lost.
func (l *Lease) end(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	l.ended, l.reason = true, reason
	if l.stop != nil {
		l.stop.Stop()
	}
	l.cancel()
	close(l.lost)
}

// armStop (re)arms the timer of the stop point; l.mu held.
func (l *Lease) armStop() {
	d := time.Until(l.deadline.Add(-l.grace))
	if l.stop == nil {
		l.stop = time.AfterFunc(d, l.onStop)
	} else {
		l.stop.Reset(d)
	}
}

func (l *Lease) onStop() {
	l.mu.Lock()
	if !l.ended && time.Now().Before(l.deadline.Add(-l.grace)) {
		l.armStop() // a renewal moved the deadline meanwhile
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	l.end(ReasonDeadlinePassed)
}

// extend moves the deadline after a confirmed renewal sent at sent; a
// confirmation that arrives after the stop point is ignored.
func (l *Lease) extend(deadline time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || !time.Now().Before(l.deadline.Add(-l.grace)) {
		return false
	}
	if deadline.After(l.deadline) {
		l.deadline = deadline
		l.armStop()
	}
	return true
}

// Beginner is what Tx runs on: *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn, pgx.Tx.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Tx runs fn in a transaction that declares the period's token
// (SELECT set_config('leader_election.fencing_token', token, true)) and
// commits it. The fence in the server decides: Tx does not ask IsLeader
// first (check it before starting work you want to skip). A write with a
// token older than the lease's fails with an *Error whose SQLState is LE001
// (IsStale, errors.Is(err, ErrStale)); LE002 when no one holds the lease.
// fn's writes should also carry Token() in the protected table's column.
func (l *Lease) Tx(ctx context.Context, db Beginner, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return wrap(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	if _, err = tx.Exec(ctx, "SELECT pg_catalog.set_config('leader_election.fencing_token', $1, true)",
		strconv.FormatInt(l.token, 10)); err != nil {
		return wrap(err)
	}
	rt := &recordingTx{Tx: tx}
	if err = fn(rt); err != nil {
		return wrap(err)
	}
	if err = tx.Commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxCommitRollback) && rt.first != nil {
			// fn went on after a failed statement: the commit became a
			// rollback for that statement's error (LE001, say); keep its SQLSTATE
			return wrap(fmt.Errorf("leaderelection: commit rolled back after: %w", rt.first))
		}
		return wrap(fmt.Errorf("leaderelection: commit: %w", err))
	}
	return nil
}

// recordingTx remembers the first server error of fn's Exec calls.
type recordingTx struct {
	pgx.Tx
	first *pgconn.PgError
}

func (t *recordingTx) Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	tag, err := t.Tx.Exec(ctx, sql, args...)
	var pe *pgconn.PgError
	if err != nil && t.first == nil && errors.As(err, &pe) {
		t.first = pe
	}
	return tag, err
}
