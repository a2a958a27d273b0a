package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// sentinelClient connects to a SentinelSet through its Sentinel and
// returns two Scripters on one client: one waiting for a replica after
// each script (WithWaitReplicas), one not.
type sentinelClient struct {
	name    string
	connect func(t *testing.T, sentinel string) (waiting, plain redisstore.Scripter)
}

var sentinelClients = []sentinelClient{
	{"go-redis", func(t *testing.T, sentinel string) (redisstore.Scripter, redisstore.Scripter) {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: redistest.SentinelMaster, SentinelAddrs: []string{sentinel},
			ContextTimeoutEnabled: true, DialTimeout: 500 * time.Millisecond,
		})
		t.Cleanup(func() { _ = rdb.Close() })
		return goredisstore.New(rdb, goredisstore.WithWaitReplicas(1, 2*time.Second)), goredisstore.New(rdb)
	}},
	{"rueidis", func(t *testing.T, sentinel string) (redisstore.Scripter, redisstore.Scripter) {
		c, err := rueidis.NewClient(rueidis.ClientOption{
			InitAddress: []string{sentinel}, DisableCache: true,
			Sentinel: rueidis.SentinelOption{MasterSet: redistest.SentinelMaster},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return rueidisstore.New(c, rueidisstore.WithWaitReplicas(1, 2*time.Second)), rueidisstore.New(c)
	}},
}

// TestSentinelFailover: with one master, one replica and one Sentinel,
// decisions made (and acknowledged by the replica, WithWaitReplicas)
// before SENTINEL FAILOVER survive it, and decisions resume on the new
// master within a few seconds, on both clients.
func TestSentinelFailover(t *testing.T) {
	for _, sc := range sentinelClients {
		t.Run(sc.name, func(t *testing.T) {
			set := redistest.StartSentinelSet(t)
			waiting, plain := sc.connect(t, set.Sentinel.Addr)
			ctx := context.Background()
			rate := floodgate.Rate{Limit: 1000, Period: time.Hour}
			p := prefix(t)
			before, err := redisstore.NewTokenBucket(waiting, rate, redisstore.WithPrefix(p), redisstore.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			after, err := redisstore.NewTokenBucket(plain, rate, redisstore.WithPrefix(p), redisstore.WithTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 10; i++ {
				d, err := before.Allow(ctx, "k")
				if err != nil || !d.Allowed || d.Remaining != 1000-i {
					t.Fatalf("decision %d before the failover: %+v, %v", i, d, err)
				}
			}

			start := time.Now()
			set.Failover(t)
			attempts := 0
			var d floodgate.Decision
			for {
				attempts++
				d, err = after.Allow(ctx, "k")
				if err == nil && onMaster(t, set.Replica.Addr, p) {
					break
				}
				if time.Since(start) > 15*time.Second {
					t.Fatalf("no decision on the new master 15 s after the failover: last %+v, %v", d, err)
				}
				time.Sleep(20 * time.Millisecond) // waits for the client to switch, not for a refill
			}
			took := time.Since(start)
			t.Logf("%s: decisions resumed on the new master %v after SENTINEL FAILOVER (%d attempts)", sc.name, took.Round(time.Millisecond), attempts)
			if took > 10*time.Second {
				t.Errorf("decisions resumed %v after the failover, want within 10 s", took)
			}
			// The 10 decisions made before the switch are in the state: a
			// fresh bucket would say 999. Attempts that failed during the
			// switch may have been charged too.
			if !d.Allowed || d.Remaining > 989 || d.Remaining < 990-attempts {
				t.Fatalf("first decision on the new master: %+v; want Remaining in [%d, 989] (the 10 decisions replicated before the switch kept)",
					d, 990-attempts)
			}
		})
	}
}

// onMaster reports whether addr, the former replica, is master now and
// holds the limiter's key for "k".
func onMaster(t *testing.T, addr, prefix string) bool {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer func() { _ = rdb.Close() }()
	role, err := rdb.Do(context.Background(), "ROLE").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		return false
	}
	n, err := rdb.Exists(context.Background(), prefix+":{k}:tb").Result()
	return err == nil && n == 1
}

// TestWaitReplicasWithoutReplica: with no replica to acknowledge, a
// decision returns an error wrapping ErrNotReplicated and ErrRedis (the
// script ran on the master, but a failover could lose it).
func TestWaitReplicasWithoutReplica(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	for _, c := range []client{
		{"go-redis", goredisstore.New(rdb, goredisstore.WithWaitReplicas(1, 10*time.Millisecond))},
		{"rueidis", rueidisstore.New(rc, rueidisstore.WithWaitReplicas(1, 10*time.Millisecond))},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Redis checks WAIT's timeout in its cron (hz 10 by default), so
			// the 10 ms wait ends after up to 100 ms.
			l, err := redisstore.NewTokenBucket(c.s, floodgate.PerHour(10), redisstore.WithPrefix(prefix(t)),
				redisstore.WithTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			d, err := l.Allow(context.Background(), "k")
			if !errors.Is(err, redisstore.ErrNotReplicated) || !errors.Is(err, redisstore.ErrRedis) || d.Allowed {
				t.Fatalf("Allow with no replica: %+v, %v; want a denial with ErrNotReplicated and ErrRedis", d, err)
			}
		})
	}
}

// TestWaitReplicasOptions: invalid arguments, a client whose scripts run
// on several masters, and a go-redis client that would wait for WAIT past
// the decision's deadline (no ContextTimeoutEnabled) are refused with
// ErrInvalidOption, by the Scripter and then by the limiter constructors,
// so that no fallback answers in Redis's place for good.
func TestWaitReplicasOptions(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	noCtxTimeout := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = single.Close(); _ = noCtxTimeout.Close(); _ = cluster.Close() })
	cases := []struct {
		name string
		s    *goredisstore.Scripter
	}{
		{"n=0", goredisstore.New(single, goredisstore.WithWaitReplicas(0, time.Second))},
		{"timeout=0", goredisstore.New(single, goredisstore.WithWaitReplicas(1, 0))},
		{"cluster", goredisstore.New(cluster, goredisstore.WithWaitReplicas(1, time.Second))},
		{"no ContextTimeoutEnabled", goredisstore.New(noCtxTimeout, goredisstore.WithWaitReplicas(1, time.Second))},
		{"nil option", goredisstore.New(single, nil)},
	}
	for _, c := range cases {
		if !errors.Is(c.s.Err(), floodgate.ErrInvalidOption) {
			t.Errorf("%s: Err() = %v, want ErrInvalidOption", c.name, c.s.Err())
		}
		if _, err := c.s.EvalSha(context.Background(), "x", nil, nil); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%s: EvalSha error %v, want ErrInvalidOption", c.name, err)
		}
		for _, a := range algos {
			if _, err := a.new(c.s, floodgate.PerHour(1), redisstore.WithFallback(allowAll{})); !errors.Is(err, floodgate.ErrInvalidOption) {
				t.Errorf("%s: %s on the Scripter: %v; want refused with ErrInvalidOption", c.name, a.name, err)
			}
		}
	}
	if err := goredisstore.New(single, goredisstore.WithWaitReplicas(1, time.Second)).Err(); err != nil {
		t.Errorf("valid WithWaitReplicas on a Client: %v", err)
	}
	lazy := rueidisstore.Lazy(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}}, rueidisstore.WithWaitReplicas(-1, time.Second))
	if !errors.Is(lazy.Err(), floodgate.ErrInvalidOption) {
		t.Errorf("rueidis WithWaitReplicas(-1): Err() = %v, want ErrInvalidOption", lazy.Err())
	}
}
