// Package goredisstore runs the redisstore limiters on a go-redis v9
// client: any redis.UniversalClient (Client, ClusterClient, Ring, or a
// failover client for Sentinel). Importing it links go-redis and not
// rueidis.
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  "localhost:6379",
//		ContextTimeoutEnabled: true, // let redisstore's per-decision timeout reach the socket
//		DialerRetries:         1,    // a refused connection fails at once, with its cause
//	})
//	lim, err := redisstore.NewTokenBucket(goredisstore.New(rdb), floodgate.PerMinute(10))
//
// # Group commit
//
// Concurrent decisions share pipelines: while one pipeline is in flight,
// new script calls queue, and when it returns the queue goes out as the
// next pipeline. A lone caller sends at once (no timer, no added latency);
// under many callers the server reads and answers hundreds of scripts per
// round trip instead of one, which is what doubles go-redis's throughput
// (see the redisstore README). Each call keeps its own context: a caller
// whose deadline passes, or who hangs up, returns at once with its
// context's error, and a call withdrawn before its batch was sent never
// reaches the server. No goroutine is started, except on a ClusterClient
// (below), for the round trip of a batch that spans several masters; none
// outlives its batch.
//
// # Cluster
//
// On a ClusterClient a batch goes out as one pipeline per master, on the
// master's own client, rather than through go-redis's cluster pipeline:
// that one waits its retry backoff (MinRetryBackoff, 8 to 24 ms by
// default) before it follows a MOVED or ASK redirection, holding up the
// whole batch and every caller queued behind it, which while slots move
// cut decisions 80-fold and pushed some past the 100 ms decision timeout.
// A call answered MOVED or ASK did not run on that master: it alone is
// sent again through the ClusterClient, which follows the redirection at
// once, within its caller's deadline. No other call of the batch is sent
// twice, and nothing is sent again after any other error.
//
// # Retries
//
// go-redis retries a command that failed on the network up to MaxRetries
// times (3 by default), including after a read timeout or a connection
// reset, when the server may already have run it. For a rate-limit script
// that would charge a client twice for one request. This adapter therefore
// marks every script call as not retryable (go-redis's per-command NoRetry,
// which also stops the retry of a pipeline that holds one), whatever
// MaxRetries says: a failed decision is reported as an error, and the
// limiter's error policy or fallback answers it. The client's other
// commands keep their retries. Cluster redirections (MOVED, ASK) are still
// followed (see Cluster): the script did not run on the node that
// redirected. A NOSCRIPT
// reply in a batch is returned to its caller only, which sends EVAL; the
// other scripts of the batch ran once.
//
// # Timeouts
//
// go-redis honours a context deadline on the socket only with
// ContextTimeoutEnabled; without it, redisstore's per-decision timeout
// (redisstore.WithTimeout) is bounded by the client's ReadTimeout and
// WriteTimeout instead (3 s by default), so a stalled server stalls the
// requests it guards for that long. Set ContextTimeoutEnabled.
//
// go-redis also retries a failed dial (DialerRetries, 5 by default, 100 ms
// apart), which outlasts the default 100 ms decision timeout: while Redis
// refuses connections, every decision then fails with "context deadline
// exceeded" instead of "connection refused", and waits out its whole
// timeout. DialerRetries: 1 keeps the cause and fails at once; the next
// decision dials again anyway.
package goredisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/groupcommit"
	"github.com/floodgate-go/floodgate/redisstore/internal/waitreplicas"
	"github.com/redis/go-redis/v9"
)

// Scripter runs scripts on a go-redis client. It implements
// redisstore.Scripter.
type Scripter struct {
	client redis.UniversalClient
	// wait, when set, follows every batch: WAIT for replicas
	// (WithWaitReplicas).
	wait  *waitReplicas
	batch groupcommit.Batcher[scriptCmd]
	err   error // a configuration error every call returns
}

// scriptCmd is one script call's command and the batch's error that is not
// the command's own.
type scriptCmd struct {
	cmd     noRetry
	args    []any  // cmd's arguments, to send it again after a redirection
	key     string // its first key, which routes it on a Cluster
	payload string // the script or its SHA1, passed by pointer
	err     error  // replicas that did not acknowledge in time
}

var _ redisstore.Scripter = (*Scripter)(nil)

// Option configures a Scripter.
type Option func(*Scripter) error

// New returns a Scripter running scripts on c. The client stays the
// caller's to configure and close. An invalid option makes every call of
// the Scripter fail with an error wrapping floodgate.ErrInvalidOption
// (see Err).
func New(c redis.UniversalClient, opts ...Option) *Scripter {
	s := &Scripter{client: c}
	s.batch.Send = s.send
	for _, o := range opts {
		if o == nil {
			s.err = fmt.Errorf("%w: nil goredisstore option", floodgate.ErrInvalidOption)
			break
		}
		if s.err = o(s); s.err != nil {
			break
		}
	}
	return s
}

// Err returns the configuration error of the options given to New, if
// any; every script call returns it too.
func (s *Scripter) Err() error { return s.err }

// WithWaitReplicas makes every script call wait, after the script, until
// at least n replicas have acknowledged its writes or timeout has passed
// (Redis's WAIT, sent after the script on the same connection; a script
// itself may not call WAIT). A call whose writes were not acknowledged by
// n replicas in time returns its reply with an error wrapping
// redisstore.ErrNotReplicated. The limiter then reports a denial as a
// denial, and an allowed decision (made and charged on the master, but a
// failover now could lose it) as ErrNotReplicated wrapped in ErrRedis,
// for the caller's error policy. It bounds what a Sentinel failover can
// lose to the decisions still waiting for their acknowledgement; see the
// redisstore README for its cost. With group commit, one WAIT covers a
// whole batch.
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
// It needs a *redis.Client with one master (a Client, or a failover
// client for Sentinel), for WAIT must follow the script on its connection,
// with ContextTimeoutEnabled, for the client to stop waiting at the
// decision's deadline. On anything else (a ClusterClient or Ring, where
// WAIT cannot be routed to the node of the script) the option is an
// error.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(s *Scripter) error {
		cfg, err := waitreplicas.New(n, timeout)
		if err != nil {
			return err
		}
		rc, ok := s.client.(*redis.Client)
		if !ok {
			return fmt.Errorf("%w: WithWaitReplicas needs a *redis.Client with one master (a Client, or a failover client for Sentinel), not a %T", floodgate.ErrInvalidOption, s.client)
		}
		if !rc.Options().ContextTimeoutEnabled {
			return fmt.Errorf("%w: WithWaitReplicas needs ContextTimeoutEnabled on the client: without it go-redis waits for WAIT past the decision's deadline, and a denial would come back as a timeout", floodgate.ErrInvalidOption)
		}
		s.wait = &waitReplicas{Config: *cfg, client: rc}
		return nil
	}
}

// waitReplicas is the WAIT sent after each batch (WithWaitReplicas), and
// the client whose connection the batch and its WAIT share.
type waitReplicas struct {
	waitreplicas.Config
	client *redis.Client
}

// noRetryInt is WAIT as a command go-redis must not retry: WAIT counts the
// writes of its own connection, so on another one it would count none and
// report the batch replicated.
type noRetryInt struct{ *redis.IntCmd }

// NoRetry tells go-redis not to retry the command.
func (noRetryInt) NoRetry() bool { return true }

// EvalSha runs the script cached under sha1; a NOSCRIPT reply is returned
// wrapping redisstore.ErrNoScript.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys, args []string) ([]int64, error) {
	r, err := s.run(ctx, evalshaName, sha1, keys, args)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = fmt.Errorf("%w: %w", redisstore.ErrNoScript, err)
	}
	return r, err
}

// Eval runs the script source.
func (s *Scripter) Eval(ctx context.Context, script string, keys, args []string) ([]int64, error) {
	return s.run(ctx, evalName, script, keys, args)
}

// noRetry is a script command that go-redis must not retry: a retry after
// the server ran it would run it twice.
type noRetry struct{ *redis.IntSliceCmd }

// NoRetry tells go-redis not to retry the command.
func (noRetry) NoRetry() bool { return true }

// The command names, boxed once.
var (
	evalshaName any = "evalsha"
	evalName    any = "eval"
)

func (s *Scripter) run(ctx context.Context, name any, payload string, keys, args []string) ([]int64, error) {
	if s.err != nil {
		return nil, s.err
	}
	c := &groupcommit.Call[scriptCmd]{Ctx: ctx, V: scriptCmd{payload: payload}}
	// Arguments are passed as *string: go-redis writes those as they are,
	// where a string in an interface would cost an allocation each.
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, &c.V.payload, len(keys))
	for i := range keys {
		a = append(a, &keys[i])
	}
	for i := range args {
		a = append(a, &args[i])
	}
	c.V.args = a
	if len(keys) > 0 {
		c.V.key = keys[0]
	}
	c.V.cmd = c.V.newCmd(ctx)
	if err := s.batch.Do(c); err != nil {
		if c.Released() {
			// The script replied, and only WAIT was outstanding: the
			// reply (a denial, maybe) stands, not replicated.
			return c.V.cmd.Val(), waitreplicas.Late(err)
		}
		return nil, err
	}
	if err := c.V.cmd.Err(); err != nil {
		return nil, err
	}
	return c.V.cmd.Val(), c.V.err
}

// newCmd returns a command of the call's arguments.
func (v *scriptCmd) newCmd(ctx context.Context) noRetry {
	cmd := redis.NewIntSliceCmd(ctx, v.args...)
	if v.key != "" {
		cmd.SetFirstKeyPos(3) // route by the first key's slot
	}
	return noRetry{cmd}
}

// send runs one batch (see the package documentation: group commit).
func (s *Scripter) send(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	if s.wait != nil {
		s.sendWaiting(lead, batch)
		return
	}
	if len(batch) == 1 {
		_ = s.client.Process(lead.Ctx, lead.V.cmd)
		return
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		sendCluster(cc, lead, batch)
		return
	}
	p := s.client.Pipeline()
	for _, c := range batch {
		_ = p.Process(c.Ctx, c.V.cmd)
	}
	// lead's deadline is the latest of the batch and bounds the socket
	// reads and writes of all; its caller's cancellation must not abort
	// the others' commands.
	_, _ = p.Exec(groupcommit.DeadlineOnly{Parent: lead.Ctx})
}

// sendWaiting runs a batch and then its WAIT on one connection, in two
// steps, so that the scripts' replies are in hand before WAIT can hold
// anything up, and WAIT can be given up on without losing them (see
// WithWaitReplicas). A go-redis pipeline whose last reply times out
// reports the error on every command of it.
func (s *Scripter) sendWaiting(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	conn := s.wait.client.Conn()
	defer func() { _ = conn.Close() }()
	ctx := groupcommit.DeadlineOnly{Parent: lead.Ctx}
	p := conn.Pipeline()
	for _, c := range batch {
		_ = p.Process(c.Ctx, c.V.cmd)
	}
	_, _ = p.Exec(ctx)
	ran := false
	for _, c := range batch {
		if c.V.cmd.Err() == nil {
			ran = true
			c.Release()
		}
	}
	if !ran {
		return // no script ran: nothing to wait for
	}
	if err := s.wait.await(lead.Ctx, conn, batch); err != nil {
		for _, c := range batch {
			if c.V.cmd.Err() == nil {
				c.V.err = err
			}
		}
	}
}

// await sends WAIT on conn, timed by the batch's earliest deadline, and
// returns nil if enough replicas acknowledged. ctx lends its values.
func (w *waitReplicas) await(ctx context.Context, conn *redis.Conn, batch []*groupcommit.Call[scriptCmd]) error {
	dl, ok := groupcommit.EarliestDeadline(batch)
	plan, err := w.Plan(time.Now(), dl, ok)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	if ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, plan.Cutoff)
		defer cancel()
	}
	cmd := noRetryInt{redis.NewIntCmd(ctx, "wait", w.N, plan.Millis)}
	_ = conn.Process(ctx, cmd)
	got, err := cmd.Result()
	return w.Check(plan, got, err)
}

// sendCluster runs a batch on a Cluster: one pipeline per master, on that
// master's own client, so that a redirection holds up no other call.
// (go-redis's cluster pipeline waits its retry backoff, 8 to 24 ms by
// default, before it follows a MOVED or ASK, and the whole batch and the
// callers queued behind it wait with it: while slots move, decisions
// slowed down 80-fold and some passed the 100 ms decision timeout.) A
// call answered MOVED or ASK did not run on that master: it alone is sent
// again, through the cluster client, which follows the redirection at
// once, under its caller's own context. No other call of the batch is
// sent twice, and nothing is re-sent after any other error.
func sendCluster(cc *redis.ClusterClient, lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	ctx := groupcommit.DeadlineOnly{Parent: lead.Ctx}
	pipes := make(map[*redis.Client]redis.Pipeliner, 3)
	for _, c := range batch {
		node, err := cc.MasterForKey(ctx, c.V.key)
		if err != nil {
			c.V.cmd.SetErr(err)
			continue
		}
		p := pipes[node]
		if p == nil {
			p = node.Pipeline()
			pipes[node] = p
		}
		_ = p.Process(c.Ctx, c.V.cmd)
	}
	// One master's pipeline runs here, the others' in goroutines of their
	// own, all at once.
	var wg sync.WaitGroup
	var here redis.Pipeliner
	for _, p := range pipes {
		if here == nil {
			here = p
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = p.Exec(ctx)
		}()
	}
	if here != nil {
		_, _ = here.Exec(ctx)
	}
	wg.Wait()
	for _, c := range batch {
		if err := c.V.cmd.Err(); redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
			// All at once: after a slot moved, a whole batch may come back
			// MOVED, and one round trip after another would add up.
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.V.cmd = c.V.newCmd(c.Ctx)
				_ = cc.Process(c.Ctx, c.V.cmd)
			}()
		}
	}
	wg.Wait()
}
