package rueidisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/rueidis"
)

// redisAddr is the server the examples use (an example cannot skip, so
// TestMain finds one first).
var redisAddr string

func TestMain(m *testing.M) {
	redistest.MainWithServer(m, func(addr string) { redisAddr = addr })
}

// TestScriptIsNotRetried: a reply lost after the server ran the script
// must not make rueidis run it again (it retries only read-only commands).
// The decision fails instead, and the key was charged once.
func TestScriptIsNotRetried(t *testing.T) {
	addr := redistest.Shared(t)
	p := redistest.NewDropProxy(t, addr)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	lim, err := redisstore.NewTokenBucket(rueidisstore.New(c), floodgate.PerHour(10),
		redisstore.WithPrefix("rueidisstore-test:"+t.Name()),
		// The test is about retries, not latency: a generous timeout keeps
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
	d, err := lim.AllowN(ctx, "k", 0)
	if err != nil || d.Remaining != 8 {
		t.Fatalf("after one decision and one lost reply: %+v, %v; want Remaining 8 (charged once each)", d, err)
	}
}
