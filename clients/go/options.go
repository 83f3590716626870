// Options of Run: their defaults, their checks and the owner id.
//
// One invariant: the schedule Run follows always leaves a renewal room to be
// retried before the stop point, and the stop point comes at least Margin
// before the server's expiry (Margin < TTL/2, Renew <= (TTL-Margin-Grace)/2),
// and owner ids are unique per Run by construction (host, pid and 48 random
// bits), so two Runs never share a lease period.

package leaderelection

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// OverrunMode says what happens when a period ended but the work function has
// not returned.
type OverrunMode int

const (
	// Cancel (the default): the work's context is cancelled at the stop point
	// and Run waits for the function to return, however long it takes. It
	// stops work only if the function honours its context; the fence is
	// what rejects the writes of a function that does not.
	Cancel OverrunMode = iota
	// ExitProcess: as Cancel, and if the function has not returned by the
	// local deadline, the process exits with Options.ExitCode (os.Exit: no
	// deferred functions run, no release is sent; the lease expires on the
	// server at least Margin later).
	ExitProcess
)

// Options configure Run. Zero values take the defaults shown.
type Options struct {
	Name             string        // owner name (default "go"); the owner id is Name-host-pid-random
	TTL              time.Duration // lease ttl (default 15s, at least 100ms; whole milliseconds, the rest is dropped)
	Margin           time.Duration // deadline this long before the ttl runs out (default TTL/10, 50ms..TTL/4; at least 25ms)
	Grace            time.Duration // stop point this long before the deadline (default min(1s, (TTL-Margin)/4))
	Renew            time.Duration // renewal interval (default (TTL-Margin-Grace)/3, at most half of it)
	Retry            time.Duration // campaign interval while not leading (default 2s, at least 10ms)
	Jitter           float64       // Retry varies by ± this fraction (default 0.2; negative: none)
	StatementTimeout time.Duration // bound on every connect and statement of Run (default 5s)
	Recampaign       bool          // after a period, campaign again instead of returning
	OnOverrun        OverrunMode   // Cancel (default) or ExitProcess
	ExitCode         int           // exit status of ExitProcess (default 70; 1 to 255)
	// Metadata (extension 1.1) is published with the lease while leading
	// (le_leases.metadata, e.g. {"addr": "10.0.0.5:8080"}); nil: none.
	// Run ends with an *Error 42883 against a 1.0 server.
	Metadata json.RawMessage
}

func (o Options) resolve(key string) (Options, error) {
	// no NUL: the server refuses it, and a statement's text cannot carry it
	if key == "" || len(key) > 200 || !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
		return o, inputError("leaderelection: lease key must be 1 to 200 bytes of UTF-8 without NUL")
	}
	if o.Name == "" {
		o.Name = "go"
	}
	if !utf8.ValidString(o.Name) || strings.ContainsRune(o.Name, 0) {
		return o, inputError("leaderelection: owner name must be UTF-8 without NUL")
	}
	if o.TTL == 0 {
		o.TTL = 15 * time.Second
	}
	if o.TTL < 100*time.Millisecond {
		return o, inputError("leaderelection: ttl %v is below 100ms", o.TTL)
	}
	// the server is sent whole milliseconds: the local deadline uses the same
	o.TTL = o.TTL.Truncate(time.Millisecond)
	if o.Margin == 0 {
		o.Margin = o.TTL / 10
		if o.Margin < 50*time.Millisecond {
			o.Margin = 50 * time.Millisecond
		}
		if o.Margin > o.TTL/4 {
			o.Margin = o.TTL / 4
		}
	}
	if o.Margin < minMargin || o.Margin >= o.TTL/2 {
		return o, inputError("leaderelection: margin %v must be at least %v and below ttl/2", o.Margin, minMargin)
	}
	room := o.TTL - o.Margin
	if o.Grace == 0 {
		o.Grace = room / 4
		if o.Grace > time.Second {
			o.Grace = time.Second
		}
	}
	if o.Grace < 0 || o.Grace > room/2 {
		return o, inputError("leaderelection: grace %v must be at most (ttl-margin)/2", o.Grace)
	}
	room -= o.Grace
	if o.Renew == 0 {
		o.Renew = room / 3
	}
	if o.Renew <= 0 || o.Renew > room/2 {
		return o, inputError("leaderelection: renew %v must be at most (ttl-margin-grace)/2 = %v", o.Renew, room/2)
	}
	if o.Retry == 0 {
		o.Retry = 2 * time.Second
	}
	if o.Jitter == 0 {
		o.Jitter = 0.2
	}
	if o.Jitter < 0 {
		o.Jitter = 0
	}
	if o.Jitter > 1 || o.Retry < 10*time.Millisecond {
		return o, inputError("leaderelection: jitter must be at most 1 and retry at least 10ms")
	}
	if o.StatementTimeout == 0 {
		o.StatementTimeout = 5 * time.Second
	}
	if o.StatementTimeout < 10*time.Millisecond {
		return o, inputError("leaderelection: statement timeout %v is below 10ms", o.StatementTimeout)
	}
	if o.Metadata != nil && !json.Valid(o.Metadata) {
		return o, inputError("leaderelection: metadata is not valid JSON")
	}
	if o.ExitCode == 0 {
		o.ExitCode = 70
	}
	if o.ExitCode < 1 || o.ExitCode > 255 {
		return o, inputError("leaderelection: exit code %d must be 1 to 255", o.ExitCode)
	}
	return o, nil
}

// minMargin: the least margin between the local deadline and the server's
// expiry (clock rates and the send time's rounding fit in it).
const minMargin = 25 * time.Millisecond

// inputError is an *Error with SQLSTATE 22023 (invalid_parameter_value).
func inputError(format string, args ...interface{}) error {
	return &Error{SQLState: "22023", Err: fmt.Errorf(format, args...)}
}

// cut shortens s to at most n bytes without splitting a character.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

var ownerSeq uint64

// newOwnerID returns name-host-pid-<sequence number><48 random bits>, at most 200 bytes.
func newOwnerID(name string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	var b [8]byte
	if _, err := rand.Read(b[2:]); err != nil {
		// no entropy source: the clock still separates two Runs of one process
		binary.BigEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
	}
	r := binary.BigEndian.Uint64(b[:]) & (1<<48 - 1)
	seq := atomic.AddUint64(&ownerSeq, 1) // distinct within the process whatever the random bits
	return fmt.Sprintf("%s-%s-%d-%d%012x", cut(name, 100), cut(host, 64), os.Getpid(), seq, r)
}
