package redistest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// CheckScriptNotRetried is the test every client adapter must pass: a
// reply lost after the server ran a decision script must not make the
// client run it again. connect returns a Scripter talking to addr (a
// DropProxy in front of the shared server). The decision must fail with
// ErrRedis, and the key must have been charged once for it: the proxy drops
// the reply only after the server sent it, so the script ran exactly once
// unless the client ran it again.
func CheckScriptNotRetried(t *testing.T, connect func(t *testing.T, addr string) redisstore.Scripter) {
	t.Helper()
	p := NewDropProxy(t, Shared(t))
	ctx := context.Background()
	lim, err := redisstore.NewTokenBucket(connect(t, p.Addr()), floodgate.PerHour(10),
		redisstore.WithPrefix("redistest-retry:"+t.Name()),
		// The check is about retries, not latency: a generous timeout keeps
		// a slow reconnect on a loaded machine from failing it.
		redisstore.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := lim.Allow(ctx, "k"); err != nil { // loads the script
		t.Fatal(err)
	}
	p.Armed.Store(true)
	if _, err := lim.Allow(ctx, "k"); !errors.Is(err, redisstore.ErrRedis) {
		t.Fatalf("Allow with the reply lost: err = %v, want an error wrapping ErrRedis", err)
	}
	// The proxy drops a reply only once the server has sent it: the
	// script ran.
	if p.Dropped.Load() != 1 {
		t.Fatalf("the proxy dropped %d replies, want 1", p.Dropped.Load())
	}
	d, err := lim.AllowN(ctx, "k", 0)
	if err != nil || d.Remaining != 8 {
		t.Fatalf("after one decision and one lost reply: %+v, %v; want Remaining 8 (charged once each)", d, err)
	}
}
