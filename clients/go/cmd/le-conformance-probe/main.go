// le-conformance-probe: the Go client's probe of the conformance suite
// (test/conformance/PROTOCOL.md): leads a key through leaderelection.Run,
// does fenced units of work while Lease.IsLeader says it leads, and prints
// one JSON event a line.
//
// One invariant: an "act" event is printed only after IsLeader returned
// true for that period (or, with --ignore-cancel, inside a task that the
// package's ExitProcess mode must end by the local deadline).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"

	le "leaderelection"
)

var outMu sync.Mutex

// emit prints one event as a JSON line (os.Stdout is unbuffered).
func emit(ev string, fields map[string]interface{}) {
	fields["ev"] = ev
	b, _ := json.Marshal(fields)
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n')) //nolint:errcheck
}

func wallUs() int64 { return time.Now().UnixMicro() }

type probe struct {
	pool                  *pgxpool.Pool
	key, client, insert   string
	interval, stall, ttl  time.Duration
	ignoreCancel, stalled bool
	wrote                 bool
	shutdown              context.Context // done on SIGTERM, SIGINT or --duration-ms
}

func main() {
	dsn := flag.String("dsn", "", "connection string")
	key := flag.String("key", "", "lease key")
	owner := flag.String("owner", "", "owner name")
	ttlMs := flag.Int("ttl-ms", 0, "ttl in ms")
	intervalMs := flag.Int("interval-ms", 20, "interval between units of work, ms")
	durationMs := flag.Int("duration-ms", 0, "run this long (0: until signalled)")
	table := flag.String("table", "conformance_writes", "protected table")
	stallMs := flag.Int("stall-once-ms", 0, "stall once between act and write, ms")
	ignoreCancel := flag.Bool("ignore-cancel", false, "long tasks that ignore cancellation")
	flag.Parse()
	if *dsn == "" || *key == "" || *owner == "" || *ttlMs <= 0 || *intervalMs <= 0 {
		fmt.Fprintln(os.Stderr, "usage: le-conformance-probe --dsn DSN --key KEY --owner NAME --ttl-ms MS [--interval-ms 20] [--duration-ms MS] [--table T] [--stall-once-ms MS] [--ignore-cancel]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *durationMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*durationMs)*time.Millisecond)
		defer cancel()
	}
	client := os.Getenv("LE_CONFORMANCE_CLIENT")
	if client == "" {
		client = "go"
	}
	pool, err := pgxpool.Connect(ctx, *dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "le-conformance-probe:", err)
		emit("exit", map[string]interface{}{"code": 1})
		os.Exit(1)
	}
	p := &probe{pool: pool, key: *key, client: client,
		insert: "INSERT INTO " + pgx.Identifier(strings.Split(*table, ".")).Sanitize() +
			" (client, lease_key, owner_id, fencing_token) VALUES ($1, $2, $3, $4)",
		interval: time.Duration(*intervalMs) * time.Millisecond, stall: time.Duration(*stallMs) * time.Millisecond,
		ttl: time.Duration(*ttlMs) * time.Millisecond, ignoreCancel: *ignoreCancel, shutdown: ctx}
	// campaign every ttl/2 as the C probe does (the default 2 s is long for a 1 s ttl)
	opts := le.Options{Name: *owner, TTL: p.ttl, Recampaign: true, Retry: p.ttl / 2}
	if p.ignoreCancel {
		opts.OnOverrun = le.ExitProcess
	}
	err = le.Run(ctx, pool, *key, opts, p.period)
	code := 0
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "le-conformance-probe:", err)
		code = 1
	}
	pool.Close()
	emit("exit", map[string]interface{}{"code": code})
	os.Exit(code)
}

// period is the work of one period: units of work while IsLeader.
func (p *probe) period(ctx context.Context, l *le.Lease) error {
	emit("leader", map[string]interface{}{"token": l.Token(), "owner": l.Owner(), "wall_us": wallUs()})
	lostDone := make(chan struct{})
	go func() {
		<-l.Lost()
		emit("lost", map[string]interface{}{"token": l.Token(), "wall_us": wallUs(), "reason": l.Reason()})
		close(lostDone)
	}()
	defer func() { <-lostDone }()
	for ctx.Err() == nil && l.IsLeader() {
		if p.ignoreCancel {
			p.longTask(l)
		} else {
			p.unit(l)
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.interval):
		}
	}
	return nil
}

// unit: act, (once) a stall, then the fenced INSERT.
func (p *probe) unit(l *le.Lease) {
	emit("act", map[string]interface{}{"token": l.Token(), "wall_us": wallUs()})
	if p.wrote && p.stall > 0 && !p.stalled {
		p.stalled = true
		time.Sleep(p.stall)
	}
	// not the period's context: a paused writer does not know it was
	// cancelled, and the fence in the server is what must stop it
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.Tx(wctx, p.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(wctx, p.insert, p.client, p.key, l.Owner(), l.Token())
		return err
	})
	f := map[string]interface{}{"token": l.Token(), "ok": err == nil}
	if err != nil {
		f["sqlstate"] = le.SQLState(err)
		f["error"] = err.Error()
	} else {
		p.wrote = true
	}
	emit("write", f)
}

// longTask: 2 x ttl of sleeping in small steps, ignoring every stop request
// of the library; only the probe's own shutdown (SIGTERM) ends it early, so
// that a signalled probe still releases and exits 0.
func (p *probe) longTask(l *le.Lease) {
	step := 20 * time.Millisecond
	for end := time.Now().Add(2 * p.ttl); time.Now().Before(end) && p.shutdown.Err() == nil; {
		emit("act", map[string]interface{}{"token": l.Token(), "wall_us": wallUs()})
		time.Sleep(step)
	}
}
