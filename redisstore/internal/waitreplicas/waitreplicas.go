// Package waitreplicas times the WAIT that goredisstore and rueidisstore
// send after a batch of scripts (WithWaitReplicas), so that a caller
// always gets its script's reply, a denial included, before its deadline.
//
// WAIT blocks on the server until enough replicas acknowledge or its
// timeout passes, and Redis checks that timeout only when its event loop
// wakes (every 1/hz s, 100 ms by default, on an idle server). Sent in one
// pipeline with the scripts, a WAIT that outlived the decision's deadline
// took the scripts' replies down with it: the call failed with a timeout,
// and fail-open or a fallback let a denial through. So each adapter reads
// the scripts' replies first, then sends WAIT on the same connection (WAIT
// counts the writes of its own connection), under a Plan:
//
//   - WAIT's own timeout is at most a third of what is left before the
//     earliest deadline of the batch's callers, and at most the configured
//     timeout, so that an awake server answers it in time by itself;
//   - the client stops reading WAIT's reply at half of that time (Cutoff),
//     whatever the server does, and reports the batch not replicated;
//   - with less than 3 ms left, no WAIT is sent: the batch is reported not
//     replicated at once.
//
// Half of each caller's time is thus left for delivering the replies and,
// since a call that finds two batches in flight queues until one returns,
// for the batch queued behind them: with callers of one timeout T
// arriving all the time, a stopped replica holds each batch at most T/3
// in the steady state, and each caller waits at most 2T/3.
//
// A batch reported not replicated keeps its replies: the limiter returns a
// denial as the denial it is, and only an allowed decision as
// ErrNotReplicated (see redisstore.ErrNotReplicated). So does a caller
// whose deadline passes while its batch, sent by another caller, still
// waits for WAIT: its script's reply is released to it before WAIT is
// sent (groupcommit's Release), and it returns that reply with Late's
// error rather than its deadline's.
package waitreplicas

import (
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// Config is a WithWaitReplicas setting: wait for N replicas, at most Max.
type Config struct {
	N   int64
	Max time.Duration
}

// New returns the Config of WithWaitReplicas(n, timeout), or an error
// wrapping floodgate.ErrInvalidOption.
func New(n int, timeout time.Duration) (*Config, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: WithWaitReplicas(%d): n must be positive", floodgate.ErrInvalidOption, n)
	}
	if timeout < time.Millisecond {
		return nil, fmt.Errorf("%w: WithWaitReplicas timeout %s: at least 1ms (WAIT counts milliseconds, and 0 waits forever)", floodgate.ErrInvalidOption, timeout)
	}
	return &Config{N: int64(n), Max: timeout}, nil
}

// Plan is the WAIT of one batch.
type Plan struct {
	// Millis is WAIT's own timeout, at least 1.
	Millis int64
	// Cutoff is when the client stops reading WAIT's reply; zero when the
	// batch has no deadline.
	Cutoff time.Time
}

// minLeft is the least time left before a batch's earliest deadline for
// which WAIT is sent: a third of it must make at least WAIT's 1 ms.
const minLeft = 3 * time.Millisecond

// Plan returns the WAIT to send at now after a batch whose callers'
// earliest deadline is dl (ok false: no caller has one), or an error
// wrapping redisstore.ErrNotReplicated when too little time is left to
// send one.
func (c *Config) Plan(now, dl time.Time, ok bool) (Plan, error) {
	if !ok {
		return Plan{Millis: c.Max.Milliseconds()}, nil
	}
	left := dl.Sub(now)
	if left < minLeft {
		return Plan{}, fmt.Errorf("%w: %v left before the deadline, too little to wait for replicas", redisstore.ErrNotReplicated, left.Round(time.Microsecond))
	}
	wait := min(c.Max, left/3)
	return Plan{Millis: wait.Milliseconds(), Cutoff: now.Add(left / 2)}, nil
}

// Check returns nil if WAIT's reply (got, or err when there was none, as
// when the client stopped reading at the cutoff) says that N replicas
// acknowledged, and an error wrapping redisstore.ErrNotReplicated
// otherwise. The cause is not wrapped: a context's deadline passing here
// is not the decision's timeout.
func (c *Config) Check(p Plan, got int64, err error) error {
	if err != nil {
		return fmt.Errorf("%w: no reply to WAIT %d %d in time: %v", redisstore.ErrNotReplicated, c.N, p.Millis, err)
	}
	if got < c.N {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %d ms", redisstore.ErrNotReplicated, got, c.N, p.Millis)
	}
	return nil
}

// Late returns the error of a call whose script replied but whose
// caller's context ended (err) while its batch still waited for WAIT: it
// wraps redisstore.ErrNotReplicated, so that the limiter reads the reply
// and reports a denial as a denial, and not err, for the deadline passed
// after the decision was made.
func Late(err error) error {
	return fmt.Errorf("%w: the call's deadline came before WAIT's reply (%v)", redisstore.ErrNotReplicated, err)
}
