package redisstore_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// TestSharedDialSparesOthers: a caller who gives up while its command is
// dialling one of rueidis's shared connections must not fail the other
// callers' decisions. rueidis dials a connection it has not made yet (it
// keeps several per server, made as commands first pick them) or lost
// under the context of the command that finds it missing, and hands the
// dial's error to every command that waited for that connection meanwhile;
// when that context ends first (its caller hung up, or its own deadline
// passed), the error is the context's, and the waiting callers' decisions
// failed with it — context.DeadlineExceeded for callers 10 s from their
// deadline, the stray timeouts of TestBatchedCallersGiveUp, 1 run in 10
// under -race with FLOODGATE_FULL=1 — which fail-open would admit
// uncharged. The limiter now sends commands under a context only the
// decision timeout ends (groupcommit.Shared) and the caller leaves by its
// own.
//
// Each round makes a client with two connections (PipelineMultiplex 1),
// of which NewClient dials one; a dial after that is held until the test
// lets it go. A round counts when the first caller's command picks the
// connection not yet made: its caller then leaves while live callers'
// commands go out on both connections, some waiting for the held dial.
func TestSharedDialSparesOthers(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		hangUp bool // the caller cancels; otherwise its deadline passes
	}{
		{"caller hangs up", true},
		{"caller's deadline", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tested := 0
			for round := 0; round < 60 && tested < 8; round++ {
				if sharedDialRound(t, srv.Addr, tc.hangUp) {
					tested++
				}
			}
			if tested < 2 {
				t.Fatalf("%d rounds found a connection to dial: the test did not test it", tested)
			}
		})
	}
}

// sharedDialRound runs one round of TestSharedDialSparesOthers and
// reports whether the leaving caller's command dialled.
func sharedDialRound(t *testing.T, addr string, hangUp bool) bool {
	t.Helper()
	var armed atomic.Bool
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{addr}, DisableCache: true, PipelineMultiplex: 1,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			if armed.Load() {
				select {
				case held <- struct{}{}:
				default:
				}
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return d.DialContext(ctx, "tcp", dst)
		},
	})
	if err != nil {
		t.Fatalf("rueidis: %v", err)
	}
	defer c.Close()
	armed.Store(true)
	l, err := redisstore.NewTokenBucket(rueidisstore.New(c), floodgate.PerHour(1000), redisstore.WithPrefix(prefix(t)), patient)
	mustNot(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	if !hangUp {
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	}
	defer cancel()
	left := make(chan error, 1)
	go func() {
		_, err := l.AllowN(ctx, "leaving", 1)
		left <- err
	}()
	select {
	case <-held:
	case <-left:
		// Its command picked the connection NewClient made.
		close(release)
		return false
	}
	const live = 8
	var wg sync.WaitGroup
	errs := make(chan error, live)
	for i := 0; i < live; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.AllowN(context.Background(), "live-"+strconv.Itoa(i), 1)
			if err == nil && !d.Allowed {
				t.Errorf("live caller %d: %+v, want allowed", i, d)
			}
			errs <- err
		}()
	}
	// The live callers' commands reach rueidis: some wait for the held
	// connection, the others queue for the next batch.
	time.Sleep(20 * time.Millisecond)
	if hangUp {
		cancel()
	}
	select {
	case err := <-left:
		if err == nil {
			t.Errorf("the leaving caller got an answer from a connection still being dialled")
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the leaving caller still waits for the dial 5 s after its context ended")
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a live caller's decision failed because another caller left during a dial: %v", err)
		}
	}
	return true
}

// TestLazyDialTimeoutIsNotTheCaller: a Lazy Scripter connects on the first
// decision, whose deadline may be a caller's own and short; the client it
// makes must not keep that deadline as its dial timeout, or every later
// dial of that client (the connections rueidis makes as commands first
// pick them, or after one is lost) fails once it takes longer, with the
// error of every command waiting for it: live callers' decisions failed
// because the first caller was in a hurry. Here the first decision has
// 500 ms, time enough to connect, and every dial after it takes 800 ms;
// the client keeps eight connections (PipelineMultiplex 3), so that some
// are made after the first decision.
func TestLazyDialTimeoutIsNotTheCaller(t *testing.T) {
	srv := redistest.Start(t)
	var armed atomic.Bool
	var slow atomic.Int32
	lazy := rueidisstore.Lazy(rueidis.ClientOption{
		InitAddress: []string{srv.Addr}, DisableCache: true, PipelineMultiplex: 3,
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			if armed.Load() {
				slow.Add(1)
				// A connect that takes 800 ms, bounded as net.Dialer
				// bounds it: by its Timeout and ctx.
				if d.Timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, d.Timeout)
					defer cancel()
				}
				select {
				case <-time.After(800 * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return d.DialContext(ctx, "tcp", dst)
		},
	})
	t.Cleanup(lazy.Close)
	l, err := redisstore.NewTokenBucket(lazy, floodgate.PerHour(1000), redisstore.WithPrefix(prefix(t)), patient)
	mustNot(t, err)
	first, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if d, err := l.AllowN(first, "first", 1); err != nil || !d.Allowed {
		t.Fatalf("first decision, with 500 ms to connect: %+v, %v", d, err)
	}
	armed.Store(true)
	for i := 0; i < 20; i++ {
		d, err := l.AllowN(context.Background(), "live-"+strconv.Itoa(i), 1)
		if err != nil || !d.Allowed {
			t.Fatalf("live decision %d after a hurried first one: %+v, %v", i, d, err)
		}
	}
	if slow.Load() == 0 {
		t.Fatalf("no connection was made after the first decision: the test did not test it")
	}
}
