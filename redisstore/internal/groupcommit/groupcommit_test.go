package groupcommit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// server is a fake Send: it records each batch (the values of its calls
// and which one led) and, while held, keeps each batch in flight until
// release lets it return, as a pipeline in flight does.
type server struct {
	held    bool
	release chan struct{}
	mu      sync.Mutex
	batches [][]int
	leads   []int
	sent    chan int // receives the size of each batch as it starts
}

func newServer(held bool) *server {
	return &server{held: held, release: make(chan struct{}), sent: make(chan int, 100)}
}

func (s *server) send(lead *Call[int], batch []*Call[int]) {
	s.sent <- len(batch)
	if s.held {
		<-s.release
	}
	vals := make([]int, len(batch))
	for i, c := range batch {
		vals[i] = c.V
		c.V *= 10 // the reply
	}
	s.mu.Lock()
	s.batches = append(s.batches, vals)
	s.leads = append(s.leads, lead.V/10)
	s.mu.Unlock()
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

// TestQueuedCallsShareTheNextBatch: calls made while a batch is in flight
// go out together in the next one, led by the call with the latest
// deadline, and each gets its own reply.
func TestQueuedCallsShareTheNextBatch(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	var wg sync.WaitGroup
	do := func(ctx context.Context, v int) {
		defer wg.Done()
		c := &Call[int]{Ctx: ctx, V: v}
		if err := b.Do(c); err != nil || c.V != 10*v {
			t.Errorf("call %d: reply %d, %v", v, c.V, err)
		}
	}
	wg.Add(1)
	go do(context.Background(), 1)
	<-s.sent // call 1 in flight
	base := time.Now().Add(time.Hour)
	for v := 2; v <= 5; v++ {
		// Call 4 has the latest deadline.
		dl := base.Add(time.Duration(v) * time.Second)
		if v == 4 {
			dl = base.Add(time.Minute)
		}
		ctx, cancel := context.WithDeadline(context.Background(), dl)
		defer cancel()
		wg.Add(1)
		go do(ctx, v)
	}
	waitQueued(t, &b, 4)
	s.release <- struct{}{}
	s.release <- struct{}{}
	wg.Wait()
	if len(s.batches) != 2 || len(s.batches[1]) != 4 || s.leads[1] != 4 {
		t.Fatalf("batches %v led by %v; want [1] then the 4 queued calls led by call 4", s.batches, s.leads)
	}
}

// TestQueuedCallWithdraws: a queued call whose context ends returns its
// context's error at once and is never sent.
func TestQueuedCallWithdraws(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Do(&Call[int]{Ctx: context.Background(), V: 1})
	}()
	<-s.sent
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() { errc <- b.Do(&Call[int]{Ctx: ctx, V: 2}) }()
	waitQueued(t, &b, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("withdrawn call: %v, want context.Canceled", err)
	}
	s.release <- struct{}{}
	<-done
	if len(s.batches) != 1 {
		t.Fatalf("batches %v: the withdrawn call was sent", s.batches)
	}
	// The batcher is idle again: the next call goes alone.
	c := &Call[int]{Ctx: context.Background(), V: 3}
	go func() { <-s.sent; s.release <- struct{}{} }()
	if err := b.Do(c); err != nil || c.V != 30 || len(s.batches) != 2 {
		t.Fatalf("call after a withdrawal: %d, %v, batches %v", c.V, err, s.batches)
	}
}

// TestCallerLeavesBatchInFlight: a call already in a batch that another
// caller sends returns its context's error when the context ends, without
// waiting for the batch.
func TestCallerLeavesBatchInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	s := newServer(true)
	b := Batcher[int]{Send: s.send}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Do(&Call[int]{Ctx: context.Background(), V: 1}) }()
	<-s.sent
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	errc := make(chan error)
	go func() { errc <- b.Do(&Call[int]{Ctx: ctx, V: 2}) }()
	waitQueued(t, &b, 1)
	// A call without a deadline leads the next batch.
	wg.Add(1)
	go func() { defer wg.Done(); _ = b.Do(&Call[int]{Ctx: context.Background(), V: 3}) }()
	waitQueued(t, &b, 2)
	s.release <- struct{}{}
	if n := <-s.sent; n != 2 {
		t.Fatalf("second batch of %d calls, want 2", n)
	}
	// The second batch is in flight until released.
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("call leaving a batch in flight: %v, want context.Canceled", err)
	}
	s.release <- struct{}{}
	wg.Wait()
	if s.leads[1] != 3 {
		t.Fatalf("second batch led by call %d, want 3 (no deadline)", s.leads[1])
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
		inFlight, finish := make(chan int, 2), make(chan struct{})
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
		errs := make(chan error, 3)
		wg.Add(3)
		go do(&Call[int]{Ctx: context.Background(), V: 1}, errs)
		<-inFlight
		lead := &Call[int]{Ctx: context.Background(), V: 2}
		go do(lead, errs)
		waitQueued(t, &b, 1)
		ctx, cancel := context.WithCancel(context.Background())
		late := &Call[int]{Ctx: ctx, V: 3}
		lateErr := make(chan error, 1)
		go do(late, lateErr)
		waitQueued(t, &b, 2)
		finish <- struct{}{} // the first batch returns; lead sends both
		if n := <-inFlight; n != 2 {
			t.Fatalf("second batch of %d calls, want 2", n)
		}
		cancel()
		err := <-lateErr
		if !errors.Is(err, context.Canceled) || late.Released() != release {
			t.Fatalf("release %v: Do = %v, Released %v", release, err, late.Released())
		}
		if release && late.V != 30 {
			t.Fatalf("released reply %d, want 30", late.V)
		}
		close(finish)
		wg.Wait()
	}
}
