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
// Concurrent decisions share pipelines: while two pipelines are in flight,
// each on a connection of the pool, new script calls queue, and when either
// returns the queue goes out as the next pipeline, so that the server runs
// one while the client reads the other's replies and writes the next. A
// lone caller sends at once (no timer, no added latency);
// under many callers the server reads and answers hundreds of decisions per
// round trip instead of one. The decisions of one algorithm in a pipeline go
// as one call of its batch script, up to 64 a call, which the server runs
// in about 60 % of the time of as many calls (see the redisstore README:
// batch scripts); only a *redis.Client and a ClusterClient do this, since a
// Ring, or a client of the caller's own, could route one batch's keys to
// several servers. A batch script answered NOSCRIPT did not run, and is
// sent again at once as EVAL of its source. Each call keeps its own context: a caller
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
// The decisions of one hash slot go as one batch script. A call answered
// MOVED or ASK, or a batch script answered MOVED, ASK or TRYAGAIN (its
// slot half moved), did not run on that master: each of its calls alone
// is sent again through the ClusterClient, which follows the redirection
// at once, within its caller's deadline. No other call of the batch is
// sent twice, and nothing is sent again after any other error.
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
	"github.com/floodgate-go/floodgate/redisstore/internal/scriptbatch"
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

// scriptCmd is one script call: its command, and its reply or error once
// its batch has run.
type scriptCmd struct {
	name       any    // evalshaName or evalName
	payload    string // the script or its SHA1, passed by pointer
	keys, args []string
	reply      []int64
	err        error // the call's own error
	werr       error // replicas that did not acknowledge in time
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
	c := &groupcommit.Call[scriptCmd]{Ctx: ctx, V: scriptCmd{name: name, payload: payload, keys: keys, args: args}}
	if err := s.batch.Do(c); err != nil {
		if c.Released() {
			// The script replied, and only WAIT was outstanding: the
			// reply (a denial, maybe) stands, not replicated.
			return c.V.reply, waitreplicas.Late(err)
		}
		return nil, err
	}
	if c.V.err != nil {
		return nil, c.V.err
	}
	return c.V.reply, c.V.werr
}

// newCmd returns the call's own command.
func (v *scriptCmd) newCmd(ctx context.Context) noRetry {
	// Arguments are passed as *string: go-redis writes those as they are,
	// where a string in an interface would cost an allocation each.
	a := make([]any, 0, 3+len(v.keys)+len(v.args))
	a = append(a, v.name, &v.payload, len(v.keys))
	for i := range v.keys {
		a = append(a, &v.keys[i])
	}
	for i := range v.args {
		a = append(a, &v.args[i])
	}
	cmd := redis.NewIntSliceCmd(ctx, a...)
	if len(v.keys) > 0 {
		cmd.SetFirstKeyPos(3) // route by the first key's slot
	}
	return noRetry{cmd}
}

// take records cmd's outcome as the call's.
func (v *scriptCmd) take(cmd noRetry) { v.reply, v.err = cmd.Result() }

// batchScript returns the batch script the call can be an entry of (see
// scriptbatch), or nil: an EVALSHA of a registered script on one key.
func (v *scriptCmd) batchScript() *scriptbatch.Script {
	if v.name != evalshaName || len(v.keys) != 1 {
		return nil
	}
	return scriptbatch.Lookup(v.payload)
}

// send runs one batch (see the package documentation: group commit).
func (s *Scripter) send(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	if s.wait != nil {
		s.sendWaiting(lead, batch)
		return
	}
	if len(batch) == 1 {
		cmd := lead.V.newCmd(lead.Ctx)
		_ = s.client.Process(lead.Ctx, cmd)
		lead.V.take(cmd)
		return
	}
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		sendCluster(cc, lead, batch)
		return
	}
	// lead's deadline is the latest of the batch and bounds the socket
	// reads and writes of all; its caller's cancellation must not abort
	// the others' commands.
	ctx := groupcommit.DeadlineOnly{Parent: lead.Ctx}
	// Only a client of one master takes batch scripts: a Ring, or a
	// client of the caller's own, could route the keys of one batch to
	// several servers.
	_, single := s.client.(*redis.Client)
	pl := plan(batch, all(batch), single, false)
	pl.exec(ctx, s.client.Pipeline(), batch)
}

// all returns the indexes of every call of batch.
func all(batch []*groupcommit.Call[scriptCmd]) []int {
	idx := make([]int, len(batch))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// pipelined is one pipeline's commands: the calls sent with their own
// command, and the batch scripts carrying the others (see scriptbatch).
type pipelined struct {
	slotted bool  // on a Cluster: batches are per slot, and may be redirected
	alone   []int // indexes of the calls sent with their own command
	cmds    []noRetry
	batches []*scriptbatch.Batch
	bcmds   []noRetry
}

// plan sorts the calls of batch at indexes idx: those that can be entries
// of a batch script (if batching) go into batches, per slot if slotted,
// and the others, or an entry that would be alone in its batch, are sent
// with their own command.
func plan(batch []*groupcommit.Call[scriptCmd], idx []int, batching, slotted bool) *pipelined {
	pl := &pipelined{slotted: slotted}
	var g scriptbatch.Group
	for _, i := range idx {
		v := &batch[i].V
		bs := v.batchScript()
		if !batching || bs == nil {
			pl.alone = append(pl.alone, i)
			continue
		}
		slot := -1
		if slotted {
			slot = scriptbatch.Slot(v.keys[0])
		}
		g.Add(bs, slot, i, v.keys[0], v.args)
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

// exec runs the pipeline on p and hands each call its reply. A batch
// script the server did not hold (NOSCRIPT) did not run: it is sent again
// at once as EVAL of its source, on p, which loads it for the next
// batches. On a Cluster (slotted) the calls and batches redirected are
// left for resendRedirected.
func (pl *pipelined) exec(ctx context.Context, p redis.Pipeliner, batch []*groupcommit.Call[scriptCmd]) {
	pl.cmds = make([]noRetry, len(pl.alone))
	for j, i := range pl.alone {
		pl.cmds[j] = batch[i].V.newCmd(batch[i].Ctx)
		_ = p.Process(batch[i].Ctx, pl.cmds[j])
	}
	pl.bcmds = make([]noRetry, len(pl.batches))
	for j, b := range pl.batches {
		pl.bcmds[j] = batchCmd(ctx, evalshaName, &b.Script.SHA, b)
		_ = p.Process(ctx, pl.bcmds[j])
	}
	_, _ = p.Exec(ctx)
	for j, i := range pl.alone {
		batch[i].V.take(pl.cmds[j])
	}
	var missing []int
	for j, b := range pl.batches {
		switch err := pl.bcmds[j].Err(); {
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			missing = append(missing, j)
			pl.bcmds[j] = batchCmd(ctx, evalName, &b.Script.Src, b)
			_ = p.Process(ctx, pl.bcmds[j])
		case !pl.slotted || !redirected(err):
			deliver(batch, b, pl.bcmds[j])
		}
	}
	if len(missing) == 0 {
		return
	}
	_, _ = p.Exec(ctx)
	for _, j := range missing {
		if !pl.slotted || !redirected(pl.bcmds[j].Err()) {
			deliver(batch, pl.batches[j], pl.bcmds[j])
		}
	}
}

// resendRedirected sends again, through the cluster client, each call of
// the pipeline that a redirection proved did not run: alone, under its
// caller's own context, all at once (after a slot moved a whole pipeline
// may come back MOVED, and one round trip after another would add up).
// The entries of a batch script that was redirected go each with its own
// command, which the cluster client routes and redirects by itself.
func (pl *pipelined) resendRedirected(cc *redis.ClusterClient, batch []*groupcommit.Call[scriptCmd], wg *sync.WaitGroup) {
	resend := func(c *groupcommit.Call[scriptCmd]) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := c.V.newCmd(c.Ctx)
			_ = cc.Process(c.Ctx, cmd)
			c.V.take(cmd)
		}()
	}
	for _, i := range pl.alone {
		if c := batch[i]; redirected(c.V.err) {
			resend(c)
		}
	}
	for j, b := range pl.batches {
		if redirected(pl.bcmds[j].Err()) {
			for _, i := range b.Calls {
				resend(batch[i])
			}
		}
	}
}

// batchCmd returns the command of batch script b: EVALSHA of its digest
// or EVAL of its source, as name and payload say.
func batchCmd(ctx context.Context, name any, payload *string, b *scriptbatch.Batch) noRetry {
	a := make([]any, 0, 3+len(b.Keys)+len(b.Args))
	a = append(a, name, payload, len(b.Keys))
	for i := range b.Keys {
		a = append(a, &b.Keys[i])
	}
	for i := range b.Args {
		a = append(a, &b.Args[i])
	}
	cmd := redis.NewIntSliceCmd(ctx, a...)
	cmd.SetFirstKeyPos(3)
	return noRetry{cmd}
}

// deliver hands each entry of b its reply or error from cmd, b's command.
func deliver(batch []*groupcommit.Call[scriptCmd], b *scriptbatch.Batch, cmd noRetry) {
	r, err := cmd.Result()
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

// redirected reports a Cluster's answer that a command did not run on
// that node: MOVED or ASK (the slot is elsewhere), or TRYAGAIN (a batch
// script whose slot is moving, some of its keys moved already).
func redirected(err error) bool {
	return redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") || redis.HasErrorPrefix(err, "TRYAGAIN")
}

// sendWaiting runs a batch and then its WAIT on one connection, in two
// steps, so that the scripts' replies are in hand before WAIT can hold
// anything up, and WAIT can be given up on without losing them (see
// WithWaitReplicas). A go-redis pipeline whose last reply times out
// reports the error on every command of it. WithWaitReplicas needs a
// *redis.Client, so batch scripts are used.
func (s *Scripter) sendWaiting(lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	conn := s.wait.client.Conn()
	defer func() { _ = conn.Close() }()
	ctx := groupcommit.DeadlineOnly{Parent: lead.Ctx}
	pl := plan(batch, all(batch), true, false)
	pl.exec(ctx, conn.Pipeline(), batch)
	ran := false
	for _, c := range batch {
		if c.V.err == nil {
			ran = true
			c.Release()
		}
	}
	if !ran {
		return // no script ran: nothing to wait for
	}
	if err := s.wait.await(lead.Ctx, conn, batch); err != nil {
		for _, c := range batch {
			if c.V.err == nil {
				c.V.werr = err
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
// slowed down 80-fold and some passed the 100 ms decision timeout.) The
// calls of one slot go as one batch script. A call answered MOVED or ASK,
// or a batch script answered MOVED, ASK or TRYAGAIN, did not run on that
// master: each of its calls alone is sent again, through the cluster
// client, which follows the redirection at once, under its caller's own
// context. No call is sent twice otherwise, and nothing is re-sent after
// any other error.
func sendCluster(cc *redis.ClusterClient, lead *groupcommit.Call[scriptCmd], batch []*groupcommit.Call[scriptCmd]) {
	ctx := groupcommit.DeadlineOnly{Parent: lead.Ctx}
	nodes := make(map[*redis.Client][]int, 3)
	for i, c := range batch {
		key := ""
		if len(c.V.keys) > 0 {
			key = c.V.keys[0]
		}
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			c.V.err = err
			continue
		}
		nodes[node] = append(nodes[node], i)
	}
	// One master's pipeline runs here, the others' in goroutines of their
	// own, all at once.
	var wg sync.WaitGroup
	pls := make([]*pipelined, 0, len(nodes))
	var here func()
	for node, idx := range nodes {
		pl := plan(batch, idx, true, true)
		pls = append(pls, pl)
		run := func() { pl.exec(ctx, node.Pipeline(), batch) }
		if here == nil {
			here = run
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	if here != nil {
		here()
	}
	wg.Wait()
	for _, pl := range pls {
		pl.resendRedirected(cc, batch, &wg)
	}
	wg.Wait()
}
