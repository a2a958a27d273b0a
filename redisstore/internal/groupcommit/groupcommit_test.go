package groupcommit

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// flight is one batch in Send: the values of its calls, its lead's, and,
// when the server holds batches, the channel that lets it return.
type flight struct {
	vals []int
	lead int
	ret  chan struct{}
}

// server is a fake Send: it records each batch and, while held, keeps each
// batch in flight until the test closes its flight's ret, as a pipeline in
// flight does, so that a test chooses which batch returns first.
type server struct {
	held    bool
	started chan *flight // each batch as it starts
	mu      sync.Mutex
	batches [][]int
	leads   []int
}

func newServer(held bool) *server {
	return &server{held: held, started: make(chan *flight, 100)}
}

func (s *server) send(lead *Call[int], batch []*Call[int]) {
	f := &flight{lead: lead.V, ret: make(chan struct{})}
	for _, c := range batch {
		f.vals = append(f.vals, c.V)
	}
	s.started <- f
	if s.held {
		<-f.ret
	}
	for _, c := range batch {
		c.V *= 10 // the reply
	}
	s.mu.Lock()
	s.batches = append(s.batches, f.vals)
	s.leads = append(s.leads, f.lead)
	s.mu.Unlock()
}

// next returns the next batch to start, failing the test if none does.
func (s *server) next(t *testing.T) *flight {
	t.Helper()
	select {
	case f := <-s.started:
		return f
	case <-time.After(5 * time.Second):
		t.Fatal("no batch started")
		return nil
	}
}

// caller runs Do for calls in goroutines and checks each reply.
type caller struct {
	t  *testing.T
	b  *Batcher[int]
	wg sync.WaitGroup
}

// do makes call v under ctx in a goroutine; it must get its reply.
func (c *caller) do(ctx context.Context, v int) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		call := &Call[int]{Ctx: ctx, V: v}
		if err := c.b.Do(call); err != nil || call.V != 10*v {
			c.t.Errorf("call %d: reply %d, %v", v, call.V, err)
		}
	}()
}

// fill puts maxInFlight lone calls in flight, valued from 1, each sent at
// once without waiting for the others, and returns their flights.
func fill(t *testing.T, s *server, c *caller) []*flight {
	t.Helper()
	var fs []*flight
	for v := 1; v <= maxInFlight; v++ {
		c.do(context.Background(), v)
		f := s.next(t)
		if !slices.Equal(f.vals, []int{v}) {
			t.Fatalf("batch %v in flight, want call %d alone", f.vals, v)
		}
		fs = append(fs, f)
	}
	return fs
}

// TestLoneCallAlone: a call with nothing in flight is sent at once, alone,
// in the caller's goroutine.
func TestLoneCallAlone(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(false)
	b := Batcher[int]{Send: s.send}
	for i := 1; i <= 3; i++ {
		c := &Call[int]{Ctx: context.Background(), V: i}
		if err := b.Do(c); err != nil || c.V != 10*i {
			t.Fatalf("call %d: reply %d, %v", i, c.V, err)
		}
	}
	if len(s.batches) != 3 {
		t.Fatalf("batches %v, want 3 of one call", s.batches)
	}
}

// TestTwoBatchesInFlight: a second call while one is in flight goes at
// once, alone; a third queues; the queue goes out when either batch in
// flight returns (here the later one, while the earlier is still on the
// wire); a batch returning with nothing queued frees its place, and the
// next call goes at once again.
func TestTwoBatchesInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	c := &caller{t: t, b: &b}
	fs := fill(t, s, c) // calls 1 and 2, each alone
	for v := 3; v <= 5; v++ {
		c.do(context.Background(), v)
	}
	waitQueued(t, &b, 3)
	close(fs[1].ret) // call 2 returns; call 1 is still in flight
	f3 := s.next(t)
	if slices.Sort(f3.vals); !slices.Equal(f3.vals, []int{3, 4, 5}) {
		t.Fatalf("batch %v after call 2 returned, want the queued calls 3, 4 and 5", f3.vals)
	}
	waitQueued(t, &b, 0)
	close(fs[0].ret) // call 1 returns with nothing queued
	waitInFlight(t, &b, 1)
	c.do(context.Background(), 6)
	f4 := s.next(t)
	if !slices.Equal(f4.vals, []int{6}) {
		t.Fatalf("batch %v, want call 6 alone: a place in flight was free", f4.vals)
	}
	c.do(context.Background(), 7) // two in flight again: 3-5 and 6
	waitQueued(t, &b, 1)
	close(f4.ret)
	if f5 := s.next(t); !slices.Equal(f5.vals, []int{7}) {
		t.Fatalf("batch %v, want the queued call 7", f5.vals)
	} else {
		close(f5.ret)
	}
	close(f3.ret)
	c.wg.Wait()
	if b.inFlight != 0 || len(b.queue) != 0 {
		t.Fatalf("idle batcher: %d in flight, %d queued", b.inFlight, len(b.queue))
	}
}

// TestQueuedCallsShareTheNextBatch: calls made while two batches are in
// flight go out together in the next one, led by the call with the latest
// deadline, and each gets its own reply.
func TestQueuedCallsShareTheNextBatch(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	c := &caller{t: t, b: &b}
	fs := fill(t, s, c)
	base := time.Now().Add(time.Hour)
	for v := 3; v <= 6; v++ {
		// Call 5 has the latest deadline.
		dl := base.Add(time.Duration(v) * time.Second)
		if v == 5 {
			dl = base.Add(time.Minute)
		}
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		defer cancel()
		c.do(ctx, v)
	}
	waitQueued(t, &b, 4)
	close(fs[0].ret)
	f := s.next(t)
	close(f.ret)
	close(fs[1].ret)
	c.wg.Wait()
	if slices.Sort(f.vals); !slices.Equal(f.vals, []int{3, 4, 5, 6}) || f.lead != 5 {
		t.Fatalf("batch %v led by %d; want the 4 queued calls led by call 5", f.vals, f.lead)
	}
}

// TestQueuedCallWithdraws: a queued call whose context ends returns its
// context's error at once and is never sent.
func TestQueuedCallWithdraws(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	c := &caller{t: t, b: &b}
	fs := fill(t, s, c)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- b.Do(&Call[int]{Ctx: ctx, V: 3}) }()
	waitQueued(t, &b, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn call: %v, want context.Canceled", err)
	}
	for _, f := range fs {
		close(f.ret)
	}
	c.wg.Wait()
	if len(s.batches) != maxInFlight {
		t.Fatalf("batches %v: the withdrawn call was sent", s.batches)
	}
	// The batcher is idle again: the next call goes alone.
	s.held = false
	call := &Call[int]{Ctx: context.Background(), V: 4}
	if err := b.Do(call); err != nil || call.V != 40 || len(s.batches) != maxInFlight+1 {
		t.Fatalf("call after a withdrawal: %d, %v, batches %v", call.V, err, s.batches)
	}
}

// TestCallerLeavesBatchInFlight: a call already in a batch that another
// caller sends returns its context's error when the context ends, without
// waiting for the batch.
func TestCallerLeavesBatchInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	c := &caller{t: t, b: &b}
	fs := fill(t, s, c)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	errc := make(chan error)
	go func() { errc <- b.Do(&Call[int]{Ctx: ctx, V: 3}) }()
	waitQueued(t, &b, 1)
	// A call without a deadline leads the next batch.
	c.do(context.Background(), 4)
	waitQueued(t, &b, 2)
	close(fs[0].ret)
	f := s.next(t)
	if len(f.vals) != 2 {
		t.Fatalf("batch %v, want the 2 queued calls", f.vals)
	}
	// The batch is in flight until released.
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("call leaving a batch in flight: %v, want context.Canceled", err)
	}
	close(f.ret)
	close(fs[1].ret)
	c.wg.Wait()
	if f.lead != 4 {
		t.Fatalf("batch led by call %d, want 4 (no deadline)", f.lead)
	}
}

// waitQueued waits until n calls are queued.
func waitQueued(t *testing.T, b *Batcher[int], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		q := len(b.queue)
		b.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitInFlight waits until n batches are in flight.
func waitInFlight(t *testing.T, b *Batcher[int], n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		b.mu.Lock()
		f := b.inFlight
		b.mu.Unlock()
		if f == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d batches in flight, want %d", f, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestEarliestDeadline: the batch must answer by its earliest deadline;
// calls without one do not count.
func TestEarliestDeadline(t *testing.T) {
	base := time.Now().Add(time.Hour)
	ctx := func(d time.Duration) context.Context {
		c, cancel := context.WithDeadline(context.Background(), base.Add(d))
		t.Cleanup(cancel)
		return c
	}
	calls := []*Call[int]{{Ctx: context.Background()}, {Ctx: ctx(3 * time.Second)}, {Ctx: ctx(time.Second)}, {Ctx: ctx(2 * time.Second)}}
	if dl, ok := EarliestDeadline(calls); !ok || !dl.Equal(base.Add(time.Second)) {
		t.Errorf("EarliestDeadline = %v, %v; want %v", dl, ok, base.Add(time.Second))
	}
	if _, ok := EarliestDeadline(calls[:1]); ok {
		t.Error("EarliestDeadline of calls without deadlines reports one")
	}
}

// TestReleasedReply: a call whose context ends while its batch, sent by
// another caller, is still in flight after Send released the replies
// (Release) gets its context's error with Released true, and its reply
// in V; without Release, Released is false.
func TestReleasedReply(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, release := range []bool{true, false} {
		inFlight, finish := make(chan int, 4), make(chan struct{})
		b := Batcher[int]{Send: func(lead *Call[int], batch []*Call[int]) {
			for _, c := range batch {
				c.V *= 10
				if release {
					c.Release()
				}
			}
			inFlight <- len(batch)
			<-finish // WAIT, held up
		}}
		var wg sync.WaitGroup
		do := func(c *Call[int], errc chan<- error) {
			defer wg.Done()
			errc <- b.Do(c)
		}
		errs := make(chan error, 4)
		wg.Add(4)
		for v := 1; v <= maxInFlight; v++ {
			go do(&Call[int]{Ctx: context.Background(), V: v}, errs)
			<-inFlight
		}
		lead := &Call[int]{Ctx: context.Background(), V: 3}
		go do(lead, errs)
		waitQueued(t, &b, 1)
		ctx, cancel := context.WithCancel(context.Background())
		late := &Call[int]{Ctx: ctx, V: 4}
		lateErr := make(chan error, 1)
		go do(late, lateErr)
		waitQueued(t, &b, 2)
		finish <- struct{}{} // a batch returns; lead sends both
		if n := <-inFlight; n != 2 {
			t.Fatalf("third batch of %d calls, want 2", n)
		}
		cancel()
		err := <-lateErr
		if !errors.Is(err, context.Canceled) || late.Released() != release {
			t.Fatalf("release %v: Do = %v, Released %v", release, err, late.Released())
		}
		if release && late.V != 40 {
			t.Fatalf("released reply %d, want 40", late.V)
		}
		close(finish)
		wg.Wait()
	}
}

// TestBatcherRandomCallers: many callers whose contexts end at random
// moments (before they call, while queued, while their batch is in
// flight) or never, against a server that holds each batch for a random
// few yields. Never more than maxInFlight batches are in Send at once;
// every call is sent at most once; each batch is led by the call with its
// latest deadline; a call that returns nil got its own reply and was
// sent; one that returns an error returns its context's, after the
// context ended. The seed is logged: a failure is reproduced with it.
func TestBatcherRandomCallers(t *testing.T) {
	defer goleak.VerifyNone(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	root := rand.New(rand.NewPCG(seed, 0))
	const callers, each = 32, 60
	var (
		mu       sync.Mutex
		inSend   int
		maxSeen  int
		sent     = make(map[int]int) // call → times sent
		b        Batcher[int]
		seedsFor [callers]uint64
	)
	b.Send = func(lead *Call[int], batch []*Call[int]) {
		mu.Lock()
		inSend++
		maxSeen = max(maxSeen, inSend)
		if inSend > maxInFlight {
			t.Errorf("%d batches in Send at once, want at most %d", inSend, maxInFlight)
		}
		leadDL, leadBounded := lead.Ctx.Deadline()
		for _, c := range batch {
			sent[c.V]++
			if dl, ok := c.Ctx.Deadline(); leadBounded && (!ok || dl.After(leadDL)) {
				t.Errorf("batch led by call %d (deadline %v) holds call %d with a later deadline", lead.V, leadDL, c.V)
			}
		}
		mu.Unlock()
		for range int(batch[0].V % 7) { // a hold of a few yields, as the reply takes its time
			runtime.Gosched()
		}
		for _, c := range batch {
			c.V = -c.V // the reply
		}
		mu.Lock()
		inSend--
		mu.Unlock()
	}
	for g := range seedsFor {
		seedsFor[g] = root.Uint64()
	}
	var wg sync.WaitGroup
	var okCalls, leftCalls [callers][]int
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(seedsFor[g], 1))
			for i := 0; i < each; i++ {
				id := 1 + g*each + i
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				switch r.IntN(5) {
				case 0:
					ctx, cancel = context.WithCancel(context.Background())
					cancel() // ended before the call
				case 1:
					ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.IntN(200))*time.Microsecond)
				case 2:
					ctx, cancel = context.WithCancel(context.Background())
					time.AfterFunc(time.Duration(r.IntN(200))*time.Microsecond, cancel)
				case 3:
					ctx, cancel = context.WithTimeout(context.Background(), time.Hour+time.Duration(r.IntN(1000))*time.Second)
				}
				call := &Call[int]{Ctx: ctx, V: id}
				err := b.Do(call)
				switch {
				case err == nil && call.V != -id:
					t.Errorf("call %d: reply %d, want %d", id, call.V, -id)
				case err == nil:
					okCalls[g] = append(okCalls[g], id)
				case ctx.Err() == nil || !errors.Is(err, ctx.Err()):
					t.Errorf("call %d: %v, with its context's error %v", id, err, ctx.Err())
				default:
					leftCalls[g] = append(leftCalls[g], id)
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	oks, lefts := 0, 0
	for g := range okCalls {
		for _, id := range okCalls[g] {
			if sent[id] != 1 {
				t.Errorf("call %d returned a reply after being sent %d times", id, sent[id])
			}
		}
		oks += len(okCalls[g])
		lefts += len(leftCalls[g])
	}
	for id, n := range sent {
		if n > 1 {
			t.Errorf("call %d sent %d times", id, n)
		}
	}
	if oks+lefts != callers*each {
		t.Fatalf("%d calls returned a reply and %d an error, want %d in all", oks, lefts, callers*each)
	}
	t.Logf("%d calls answered, %d left; %d sent; at most %d batches in flight", oks, lefts, len(sent), maxSeen)
	if oks == 0 || lefts == 0 {
		t.Fatalf("%d calls answered, %d left: the test did not test both", oks, lefts)
	}
	if b.inFlight != 0 || len(b.queue) != 0 {
		t.Fatalf("idle batcher: %d in flight, %d queued", b.inFlight, len(b.queue))
	}
}

// fixedTimeout is a Timeout whose shared context never ends.
type fixedTimeout struct{}

func (fixedTimeout) Bound(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// TestAsideCallerLeaves: with Aside, a caller to send a batch whose
// context is Bounded sends it in a goroutine and leaves when its context
// ends, while the batch stays in flight and, once it returns, the queue
// goes out as usual. Shared gives a Bounded context's shared one, with its
// values and none of its cancellation.
func TestAsideCallerLeaves(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send, Aside: true}
	c := &caller{t: t, b: &b}
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	bounded := Bounded{Context: parent, Timeout: fixedTimeout{}}
	shared, sooner := Shared(bounded)
	if !sooner || shared.Done() != nil || shared.Value(key{}) != "v" {
		t.Fatalf("Shared(Bounded): sooner %v, Done %v, value %v: want true, nil (never ends), v", sooner, shared.Done(), shared.Value(key{}))
	}
	if ctx, sooner := Shared(parent); sooner || ctx != parent {
		t.Fatalf("Shared of a context not Bounded: %v, %v, want itself, false", ctx, sooner)
	}
	errc := make(chan error)
	lone := &Call[int]{Ctx: bounded, V: 1}
	go func() { errc <- b.Do(lone) }()
	f := s.next(t)
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a Bounded caller leaving its lone batch in flight: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		close(f.ret)
		t.Fatalf("a Bounded caller still waits for its batch 5 s after its context ended")
	}
	// Still in flight: the next call goes alone beside it, and one more
	// queues until the left caller's batch returns.
	c.do(context.Background(), 2)
	f2 := s.next(t)
	c.do(context.Background(), 3)
	waitQueued(t, &b, 1)
	close(f.ret)
	f3 := s.next(t)
	if !slices.Equal(f3.vals, []int{3}) {
		t.Fatalf("batch %v after the left caller's returned, want [3]", f3.vals)
	}
	close(f3.ret)
	close(f2.ret)
	c.wg.Wait()
	waitInFlight(t, &b, 0)
}
