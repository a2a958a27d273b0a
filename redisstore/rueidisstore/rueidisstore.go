// Package rueidisstore runs the redisstore limiters on a rueidis client
// (standalone, Sentinel or Cluster: rueidis detects which). Importing it
// links rueidis and not go-redis.
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	lim, err := redisstore.NewTokenBucket(rueidisstore.New(c), floodgate.PerMinute(10))
//
// rueidis pipelines concurrent calls on shared connections by itself; on
// top of that this adapter groups concurrent script calls into one DoMulti
// (one batch in flight, the next one queued meanwhile, as goredisstore
// does: no timer, no goroutine), which saves rueidis a hand-off per
// command. It honours context deadlines, so redisstore's per-decision
// timeout applies as it is, and it retries only read-only commands after a
// network error: a script that writes, as every redisstore script does, is
// never run twice for one decision.
//
// # Start-up while Redis is down
//
// rueidis.NewClient connects before it returns, and fails when Redis
// cannot be reached: a service that builds its limiter from it cannot
// start during an outage, even with redisstore.WithFallback. Lazy returns
// a Scripter that connects on first use instead, and again after a failed
// attempt: until Redis answers, each call fails with the connection's
// error (wrapped in redisstore.ErrRedis by the limiter), so WithFallback
// answers meanwhile, and the limiter moves to Redis once it is up.
package rueidisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/groupcommit"
	"github.com/floodgate-go/floodgate/redisstore/internal/waitreplicas"
	"github.com/redis/rueidis"
)

// Scripter runs scripts on a rueidis client. It implements
// redisstore.Scripter.
type Scripter struct {
	c atomic.Pointer[rueidis.Client]
	// lazy holds what Lazy needs to connect; nil for New.
	lazy *lazyConn

	// wait, when set, follows every batch: WAIT for replicas
	// (WithWaitReplicas).
	wait  *waitreplicas.Config
	batch groupcommit.Batcher[scriptCmd]
	err   error // a configuration error every call returns
}

var _ redisstore.Scripter = (*Scripter)(nil)

// scriptCmd is one script call's command and reply.
type scriptCmd struct {
	client rueidis.Client
	cmd    rueidis.Completed
	reply  []int64
	err    error
}

// Option configures a Scripter.
type Option func(*Scripter) error

// New returns a Scripter running scripts on c. The client stays the
// caller's to configure and close. An invalid option makes every call of
// the Scripter fail with an error wrapping floodgate.ErrInvalidOption
// (see Err).
func New(c rueidis.Client, opts ...Option) *Scripter {
	s := &Scripter{}
	s.c.Store(&c)
	s.configure(c.Mode(), opts)
	return s
}

// Lazy returns a Scripter that creates its rueidis client from opt on
// first use rather than now, so that a service can start while Redis is
// down (see the package documentation). A failed connection is tried
// again by a later call, one attempt at a time; calls made while an
// attempt is under way fail at once with ErrNotConnected. Each attempt is
// bounded by opt.Dialer.Timeout (rueidis's default 5 s when zero) and by
// the calling decision's deadline. Close the Scripter to close the client.
func Lazy(opt rueidis.ClientOption, opts ...Option) *Scripter {
	s := &Scripter{lazy: &lazyConn{opt: opt}}
	// The mode is known once connected; client checks it then.
	s.configure("", opts)
	return s
}

// ErrNotConnected is wrapped by a Lazy Scripter's errors while it has no
// connection, together with the failed attempt's error (for instance
// "connection refused").
var ErrNotConnected = errors.New("rueidisstore: not connected to Redis")

func (s *Scripter) configure(mode rueidis.ClientMode, opts []Option) {
	s.batch.Send = s.send
	for _, o := range opts {
		if o == nil {
			s.err = fmt.Errorf("%w: nil rueidisstore option", floodgate.ErrInvalidOption)
			return
		}
		if s.err = o(s); s.err != nil {
			return
		}
	}
	if s.wait != nil && mode == rueidis.ClientModeCluster {
		s.err = fmt.Errorf("%w: WithWaitReplicas needs a client with one master, not a cluster client", floodgate.ErrInvalidOption)
	}
}

// Err returns the configuration error of the options given to New or
// Lazy, if any; every script call returns it too.
func (s *Scripter) Err() error { return s.err }

// Close closes the client of a Lazy Scripter, if it connected, and makes
// later calls fail. For a Scripter from New it does nothing: the client
// is the caller's.
func (s *Scripter) Close() {
	if s.lazy == nil {
		return
	}
	s.lazy.mu.Lock()
	defer s.lazy.mu.Unlock()
	s.lazy.closed = true
	if c := s.c.Swap(nil); c != nil {
		(*c).Close()
	}
}

// lazyConn is the connection state of a Lazy Scripter.
type lazyConn struct {
	opt    rueidis.ClientOption
	mu     sync.Mutex // held by the one connection attempt under way
	closed bool
}

// errClosed is returned by a closed Lazy Scripter.
var errClosed = errors.New("rueidisstore: Scripter closed")

// client returns the client, connecting a Lazy Scripter if needed.
func (s *Scripter) client(ctx context.Context) (rueidis.Client, error) {
	if c := s.c.Load(); c != nil {
		return *c, nil
	}
	if s.lazy == nil {
		return nil, errClosed
	}
	l := s.lazy
	if !l.mu.TryLock() {
		return nil, fmt.Errorf("%w: a connection attempt is under way", ErrNotConnected)
	}
	defer l.mu.Unlock()
	if l.closed {
		return nil, errClosed
	}
	if c := s.c.Load(); c != nil {
		return *c, nil
	}
	opt := l.opt
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= 0 {
			return nil, ctx.Err()
		}
		if opt.Dialer.Timeout == 0 || left < opt.Dialer.Timeout {
			opt.Dialer.Timeout = left
		}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotConnected, err)
	}
	if s.wait != nil && c.Mode() == rueidis.ClientModeCluster {
		c.Close()
		return nil, fmt.Errorf("%w: WithWaitReplicas needs a client with one master, not a cluster client", floodgate.ErrInvalidOption)
	}
	s.c.Store(&c)
	return c, nil
}

// WithWaitReplicas makes every script call wait, after the script, until
// at least n replicas have acknowledged its writes or timeout has passed
// (Redis's WAIT, sent after the script on the same dedicated connection; a
// script itself may not call WAIT). A call whose writes were not
// acknowledged by n replicas in time returns its reply with an error
// wrapping redisstore.ErrNotReplicated. The limiter then reports a denial
// as a denial, and an allowed decision (made and charged on the master,
// but a failover now could lose it) as ErrNotReplicated wrapped in
// ErrRedis, for the caller's error policy. One WAIT covers a whole batch.
//
// The wait never outlasts the decision. The scripts' replies are read
// before WAIT is sent. WAIT then waits at most a third of what is left of
// the earliest deadline among its batch's callers (the decision timeout,
// redisstore.WithTimeout, 100 ms by default, or a caller's own earlier
// deadline), and at most timeout; at half of what was left the client
// stops waiting for WAIT's reply (Redis checks WAIT's timeout only when
// its event loop wakes, every 100 ms on an idle server at the default hz
// 10), closes the connection and reports the call not replicated. Either
// way the script's reply comes back in time: a denial is never turned
// into a timeout that fail-open or a fallback would pass. A timeout above
// a third of the decision timeout is therefore never waited in full: set
// WithTimeout to at least three times timeout.
//
// It needs a client with one master (standalone or Sentinel); on a
// cluster client the option is an error.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(s *Scripter) error {
		cfg, err := waitreplicas.New(n, timeout)
		if err != nil {
			return err
		}
		s.wait = cfg
		return nil
	}
}

// EvalSha runs the script cached under sha1; a NOSCRIPT reply is returned
// wrapping redisstore.ErrNoScript.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.do(ctx, c, c.B().Evalsha().Sha1(sha1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		err = fmt.Errorf("%w: %w", redisstore.ErrNoScript, err)
	}
	return r, err
}

// Eval runs the script source.
func (s *Scripter) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	return s.do(ctx, c, c.B().Eval().Script(script).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

func (s *Scripter) do(ctx context.Context, c rueidis.Client, cmd rueidis.Completed) ([]int64, error) {
	if s.err != nil {
		return nil, s.err
	}
	call := &groupcommit.Call[scriptCmd]{Ctx: ctx, V: scriptCmd{client: c, cmd: cmd}}
	if err := s.batch.Do(call); err != nil {
		if call.Released() {
			// The script replied, and only WAIT was outstanding: the
			// reply (a denial, maybe) stands, not replicated.
			return call.V.reply, waitreplicas.Late(err)
		}
		return nil, err
	}
	return call.V.reply, call.V.err
}

// send runs one batch: a lone command with Do, several with one DoMulti.
func (s *Scripter) send(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	c := lead.V.client
	if s.wait != nil {
		s.sendWaiting(lead, batch)
		return
	}
	if len(batch) == 1 {
		lead.V.reply, lead.V.err = c.Do(lead.Ctx, lead.V.cmd).AsIntSlice()
		return
	}
	cmds := make([]rueidis.Completed, 0, len(batch))
	for _, call := range batch {
		cmds = append(cmds, call.V.cmd)
	}
	// lead's deadline is the latest of the batch; its caller's
	// cancellation must not abort the others' commands.
	ctx, cancel := groupcommit.Detached(lead.Ctx)
	rs := c.DoMulti(ctx, cmds...)
	cancel()
	for i, call := range batch {
		call.V.reply, call.V.err = rs[i].AsIntSlice()
	}
}

// sendWaiting runs a batch and then its WAIT on one dedicated connection,
// in two steps, so that the scripts' replies are in hand before WAIT can
// hold anything up, and WAIT can be given up on without losing them (see
// WithWaitReplicas): a DoMulti that ends at its deadline reports every
// reply as the error.
func (s *Scripter) sendWaiting(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	dc, release := lead.V.client.Dedicate()
	defer release()
	cmds := make([]rueidis.Completed, 0, len(batch))
	for _, call := range batch {
		cmds = append(cmds, call.V.cmd)
	}
	ctx, cancel := groupcommit.Detached(lead.Ctx)
	rs := dc.DoMulti(ctx, cmds...)
	cancel()
	ran := false
	for i, call := range batch {
		call.V.reply, call.V.err = rs[i].AsIntSlice()
		if call.V.err == nil {
			ran = true
			call.Release()
		}
	}
	if !ran {
		return // no script ran: nothing to wait for
	}
	if err := s.await(lead.Ctx, dc, batch); err != nil {
		for _, call := range batch {
			if call.V.err == nil {
				call.V.err = err
			}
		}
	}
}

// await sends WAIT on dc, timed by the batch's earliest deadline, and
// returns nil if enough replicas acknowledged. ctx lends its values.
func (s *Scripter) await(ctx context.Context, dc rueidis.DedicatedClient, batch []*groupcommit.Call[scriptCmd]) error {
	dl, ok := groupcommit.EarliestDeadline(batch)
	plan, err := s.wait.Plan(time.Now(), dl, ok)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, plan.Cutoff)
		defer cancel()
	}
	got, err := dc.Do(ctx, dc.B().Wait().Numreplicas(s.wait.N).Timeout(plan.Millis).Build()).AsInt64()
	return s.wait.Check(plan, got, err)
}
