// Package rueidisstore runs the redisstore limiters on a rueidis client
// (standalone, Sentinel or Cluster: rueidis detects which). Importing it
// links rueidis and not go-redis.
//
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}})
//	lim, err := redisstore.NewTokenBucket(rueidisstore.New(c), floodgate.PerMinute(10))
//
// rueidis pipelines concurrent calls on shared connections by itself; on
// top of that this adapter groups concurrent script calls into one DoMulti
// (two batches in flight, the next one queued meanwhile, as goredisstore
// does: no timer, no goroutine), which saves rueidis a hand-off per
// command, and sends the decisions of one algorithm in a batch as one call
// of its batch script, up to 64 a call (per hash slot on a Cluster), which
// the server runs in about 60 % of the time of as many calls (see the
// redisstore README: batch scripts). A batch script answered NOSCRIPT did
// not run and is sent again as EVAL of its source; one answered TRYAGAIN
// (its slot half moved; rueidis itself follows MOVED and ASK) did not run,
// and its calls are sent again alone. redisstore's per-decision timeout
// applies as it is, and rueidis retries only read-only commands after a
// network error: a script that writes, as every redisstore script does, is
// never run twice for one decision.
//
// rueidis does work for all its callers under one command's context: it
// dials a missing connection under it, failing every command that waited
// for that connection when the context ends first, and closes a
// connection when the deadline of a command it sent alone passes. So a
// decision's commands never go out under its caller's context, only under
// one with its values that the decision timeout alone ends; a caller whose
// context ends sooner (a hang-up, a short deadline of its own) returns
// then with its context's error, while a goroutine started for its batch
// carries the batch to its end. One caller giving up never fails another's
// decision (redisstore's TestSharedDialSparesOthers).
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
	"github.com/floodgate-go/floodgate/redisstore/internal/scriptbatch"
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

// scriptCmd is one script call, and its reply once its batch has run.
type scriptCmd struct {
	client     rueidis.Client
	eval       bool   // EVAL of the script's source; EVALSHA of its digest otherwise
	payload    string // the source or the digest
	keys, args []string
	reply      []int64
	err        error
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
// bounded by opt.Dialer.Timeout (rueidis's default 5 s when zero), which
// the client keeps for its later dials; the calling decision waits for it
// until its own deadline, and an attempt that outlasts it goes on, for
// the calls after it. Close the Scripter to close the client (it waits
// for an attempt under way).
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
	s.batch.Aside = true
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

// client returns the client, connecting a Lazy Scripter if needed. The
// attempt runs in a goroutine of its own, bounded by opt's dial timeout
// alone, and ctx bounds only the wait for it: the client keeps opt's
// timeout for every later dial, and rueidis hands a dial's error to
// every command waiting for that connection, so one decision's short
// deadline as the timeout would fail later callers' decisions whenever a
// dial took longer (TestLazyDialTimeoutIsNotTheCaller). An attempt that
// outlasts its caller stores its client for the next.
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
	if l.closed {
		l.mu.Unlock()
		return nil, errClosed
	}
	if c := s.c.Load(); c != nil {
		l.mu.Unlock()
		return *c, nil
	}
	if err := ctx.Err(); err != nil {
		l.mu.Unlock()
		return nil, err
	}
	type attempt struct {
		c   rueidis.Client
		err error
	}
	done := make(chan attempt, 1)
	go func() {
		defer l.mu.Unlock()
		c, err := s.connect()
		done <- attempt{c, err}
	}()
	select {
	case a := <-done:
		return a.c, a.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: the connection attempt goes on: %w", ErrNotConnected, ctx.Err())
	}
}

// connect makes a Lazy Scripter's client and stores it; l.mu is held.
func (s *Scripter) connect() (rueidis.Client, error) {
	c, err := rueidis.NewClient(s.lazy.opt)
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
	r, err := s.do(ctx, false, sha1, keys, args)
	if re, ok := rueidis.IsRedisErr(err); ok && re.IsNoScript() {
		err = fmt.Errorf("%w: %w", redisstore.ErrNoScript, err)
	}
	return r, err
}

// Eval runs the script source.
func (s *Scripter) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return s.do(ctx, true, script, keys, args)
}

func (s *Scripter) do(ctx context.Context, eval bool, payload string, keys, args []string) ([]int64, error) {
	if s.err != nil {
		return nil, s.err
	}
	c, err := s.client(ctx)
	if err != nil {
		return nil, err
	}
	call := &groupcommit.Call[scriptCmd]{Ctx: ctx, V: scriptCmd{client: c, eval: eval, payload: payload, keys: keys, args: args}}
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

// builder is what a batch is sent through: the client, or a dedicated
// connection of it (WithWaitReplicas).
type builder interface {
	B() rueidis.Builder
	DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult
}

// build returns the call's own command.
func (v *scriptCmd) build(c builder) rueidis.Completed {
	if v.eval {
		return c.B().Eval().Script(v.payload).Numkeys(int64(len(v.keys))).Key(v.keys...).Arg(v.args...).Build()
	}
	return c.B().Evalsha().Sha1(v.payload).Numkeys(int64(len(v.keys))).Key(v.keys...).Arg(v.args...).Build()
}

// batchScript returns the batch script the call can be an entry of (see
// scriptbatch), or nil: an EVALSHA of a registered script on one key.
func (v *scriptCmd) batchScript() *scriptbatch.Script {
	if v.eval || len(v.keys) != 1 {
		return nil
	}
	return scriptbatch.Lookup(v.payload)
}

// send runs one batch: a lone command with Do, several with one DoMulti.
func (s *Scripter) send(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	c := lead.V.client
	if s.wait != nil {
		s.sendWaiting(lead, batch)
		return
	}
	// rueidis does work for every caller under one command's context:
	// it dials a missing connection under it, failing the commands that
	// wait for that connection with the dial's error when the context
	// ends first, and closes a connection when the deadline of a command
	// it sent alone passes, failing the commands queued behind it. So a
	// batch goes out under a context that only the decision timeout ends
	// (groupcommit.Shared), never one that ends because one caller gave
	// up; a caller who leaves sooner does not wait for it (Batcher.Aside).
	ctx, shared := groupcommit.Shared(lead.Ctx)
	if len(batch) == 1 {
		lead.V.reply, lead.V.err = c.Do(ctx, lead.V.build(c)).AsIntSlice()
		return
	}
	if !shared {
		// lead's deadline is the latest of the batch; its caller's
		// cancellation must not abort the others' commands.
		var cancel context.CancelFunc
		ctx, cancel = groupcommit.Detached(lead.Ctx)
		defer cancel()
	}
	plan(batch, c.Mode() == rueidis.ClientModeCluster).exec(ctx, c, batch)
}

// pipelined is one DoMulti's commands: the calls sent with their own
// command, and the batch scripts carrying the others (see scriptbatch).
type pipelined struct {
	alone   []int // indexes of the calls sent with their own command
	batches []*scriptbatch.Batch
}

// plan sorts the calls of batch: those that can be entries of a batch
// script go into batches, per slot on a Cluster (slotted), and the others,
// or an entry that would be alone in its batch, are sent with their own
// command.
func plan(batch []*groupcommit.Call[scriptCmd], slotted bool) *pipelined {
	pl := &pipelined{}
	var g scriptbatch.Group
	for i, c := range batch {
		bs := c.V.batchScript()
		if bs == nil {
			pl.alone = append(pl.alone, i)
			continue
		}
		slot := -1
		if slotted {
			slot = scriptbatch.Slot(c.V.keys[0])
		}
		g.Add(bs, slot, i, c.V.keys[0], c.V.args)
	}
	for _, b := range g.Batches {
		if b.Len() == 1 {
			pl.alone = append(pl.alone, b.Calls[0])
			continue
		}
		b.Finish()
		pl.batches = append(pl.batches, b)
	}
	return pl
}

// exec sends the commands in one DoMulti on c and hands each call its
// reply. A batch script that did not run for a reason that proves it (see
// again) is sent again at once, in a second DoMulti.
func (pl *pipelined) exec(ctx context.Context, c builder, batch []*groupcommit.Call[scriptCmd]) {
	cmds := make([]rueidis.Completed, 0, len(pl.alone)+len(pl.batches))
	for _, i := range pl.alone {
		cmds = append(cmds, batch[i].V.build(c))
	}
	for _, b := range pl.batches {
		cmds = append(cmds, c.B().Evalsha().Sha1(b.Script.SHA).Numkeys(int64(len(b.Keys))).Key(b.Keys...).Arg(b.Args...).Build())
	}
	rs := c.DoMulti(ctx, cmds...)
	for j, i := range pl.alone {
		batch[i].V.reply, batch[i].V.err = rs[j].AsIntSlice()
	}
	var retry []rueidis.Completed
	var retried []int // for each command of retry: a batch's index, or -1 - a call's index
	for j, b := range pl.batches {
		r, err := rs[len(pl.alone)+j].AsIntSlice()
		switch again(err) {
		case loadScript:
			// Not held by the server: nothing ran, and EVAL loads it for
			// the next batches.
			retry = append(retry, c.B().Eval().Script(b.Script.Src).Numkeys(int64(len(b.Keys))).Key(b.Keys...).Arg(b.Args...).Build())
			retried = append(retried, j)
		case sendAlone:
			// Its slot is moving and some of its keys are gone: nothing
			// ran; each call goes alone, and rueidis follows its
			// redirection.
			for _, i := range b.Calls {
				retry = append(retry, batch[i].V.build(c))
				retried = append(retried, -1-i)
			}
		default:
			deliver(batch, b, r, err)
		}
	}
	if len(retry) == 0 {
		return
	}
	rs = c.DoMulti(ctx, retry...)
	for k, j := range retried {
		r, err := rs[k].AsIntSlice()
		if j < 0 {
			batch[-1-j].V.reply, batch[-1-j].V.err = r, err
			continue
		}
		if again(err) == sendAlone {
			for _, i := range pl.batches[j].Calls {
				batch[i].V.reply, batch[i].V.err = batch[i].V.one(ctx, c)
			}
			continue
		}
		deliver(batch, pl.batches[j], r, err)
	}
}

// one sends the call alone, for a batch script of EVAL that met a moving
// slot.
func (v *scriptCmd) one(ctx context.Context, c builder) ([]int64, error) {
	return c.DoMulti(ctx, v.build(c))[0].AsIntSlice()
}

// retryKind is what a batch script's error says about sending it again.
type retryKind int

const (
	noRetry    retryKind = iota // the error is the entries'
	loadScript                  // NOSCRIPT: send EVAL of the source
	sendAlone                   // TRYAGAIN: send each entry alone
)

// again sorts a batch script's error. rueidis itself follows MOVED and
// ASK, which send the whole batch to the slot's node, and answers a
// script's TRYAGAIN (a batch whose slot is moving, some of its keys moved
// already) without trying again, since a script may write.
func again(err error) retryKind {
	re, ok := rueidis.IsRedisErr(err)
	switch {
	case !ok:
		return noRetry
	case re.IsNoScript():
		return loadScript
	case re.IsTryAgain():
		return sendAlone
	}
	return noRetry
}

// deliver hands each entry of b its reply or error from r and err, b's
// command's reply.
func deliver(batch []*groupcommit.Call[scriptCmd], b *scriptbatch.Batch, r []int64, err error) {
	if err == nil {
		err = scriptbatch.Split(r, b.Len(), func(j int, reply []int64, err error) {
			batch[b.Calls[j]].V.reply, batch[b.Calls[j]].V.err = reply, err
		})
	}
	if err != nil {
		for _, i := range b.Calls {
			batch[i].V.reply, batch[i].V.err = nil, err
		}
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
	ctx, cancel := groupcommit.Detached(lead.Ctx)
	plan(batch, false).exec(ctx, dc, batch)
	cancel()
	ran := false
	for _, call := range batch {
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
