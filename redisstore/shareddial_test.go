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
