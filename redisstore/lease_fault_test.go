package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// TestLeaseServerRestart kills the server while an instance holds leases
// and starts it again, empty (persistence is off). While it is down the
// instance allows exactly the units it holds, without a round trip, then
// fails (ErrRedis, never allowed) or, with a fallback, lets the fallback
// answer. After the restart the key is forgotten, as in the plain mode,
// and the units leased before it can still be spent: the key allows its
// capacity plus at most what was held, never more.
func TestLeaseServerRestart(t *testing.T) {
	verifyNoLeaks(t)
	srv := redistest.Start(t)
	rate := floodgate.Rate{Limit: 40, Period: time.Hour}
	ctx := context.Background()
	for _, newClient := range []func(testing.TB, string) client{leaseGoRedis, rueidisClient} {
		for _, a := range leaseAlgos {
			c := newClient(t, srv.Addr) // a fresh client: the last subtest restarted the server
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				clock := floodgatetest.NewClock(leaseEpoch)
				mem, _ := floodgate.NewTokenBucket(rate)
				fb := &countingLimiter{Limiter: mem}
				p := prefix(t)
				opts := []redisstore.Option{redisstore.WithClock(clock.Now), redisstore.WithPrefix(p),
					redisstore.WithTimeout(time.Second), redisstore.WithLease(quarter)}
				A, err := a.redis(c.s, rate, opts...)
				if err != nil {
					t.Fatal(err)
				}
				F, err := a.redis(c.s, rate, append(opts, redisstore.WithFallback(fb))...)
				if err != nil {
					t.Fatal(err)
				}
				B, _ := a.redis(c.s, rate, opts...)
				for i := 0; i < 4; i++ {
					mustAllowN(t, A, "a", 1, true)
					mustAllowN(t, F, "f", 1, true)
				}
				mustAllowN(t, B, "b", 1, true)
				mustAllowN(t, B, "b", 1, true)
				hA, hF, hB := held(A), held(F), held(B)
				srv.Stop()
				t.Cleanup(func() { _ = srv.Restart() }) // for the next subtest, if this one fails
				for i := 0; i < hA; i++ {
					mustAllowN(t, A, "a", 1, true)
				}
				if d, err := A.AllowN(ctx, "a", 1); d.Allowed || !errors.Is(err, redisstore.ErrRedis) {
					t.Fatalf("Redis down, lease spent: %+v, %v; want a denial wrapping ErrRedis", d, err)
				}
				for i := 0; i < hF+3; i++ {
					mustAllowN(t, F, "f", 1, true)
				}
				if got := fb.calls.Load(); got != 3 {
					t.Fatalf("the fallback answered %d decisions, want the 3 after the lease", got)
				}
				// B's units, leased before the restart, spent after it.
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
				C, _ := a.redis(c.s, rate, opts...)
				// A client finds each of its connections broken on its
				// first call after the restart (rueidis has several):
				// reports, which charge nothing, until 16 succeed in a row.
				for ok, deadline := 0, time.Now().Add(10*time.Second); ok < 16; {
					if _, err := C.AllowN(ctx, "warm-up", 0); err == nil {
						ok++
						continue
					} else if time.Now().After(deadline) {
						t.Fatalf("no decision after the restart: %v", err)
					}
					ok = 0
					time.Sleep(20 * time.Millisecond)
				}
				got := allowUntilDenied(t, C, "b", 2*rate.Limit) + allowUntilDenied(t, B, "b", 2*rate.Limit)
				if got != rate.Limit+hB {
					t.Fatalf("after the restart %d units of a forgotten key were allowed, want its capacity %d plus the %d leased before", got, rate.Limit, hB)
				}
			})
		}
	}
}

// TestLeaseCluster runs instances that lease on a three-master Cluster,
// through both cluster clients: hot keys and cold keys over many slots
// (the lease marks share their key's slot, or the scripts would fail with
// CROSSSLOT), never more than the exact limiter allows. Then one master
// is killed and restarted within the cluster's node timeout: the keys it
// held keep answering from their leases, then fail, and after the restart
// decide again; the keys of the other masters never notice.
func TestLeaseCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cl := redistest.StartCluster(t)
	crdb, rc := clusterClients(t, cl.Addrs())
	rate := floodgate.Rate{Limit: 120, Period: time.Second}
	for _, c := range []client{{"go-redis", goredisstore.New(crdb)}, {"rueidis", rueidisstore.New(rc)}} {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				clock := floodgatetest.NewClock(leaseEpoch)
				insts := a.instances(t, 3, c.s, rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(prefix(t)),
					redisstore.WithLease(redisstore.Lease{MaxShare: 4, Horizon: 30 * time.Millisecond}))
				oracle := a.oracle(t, rate, clock)
				replayRandom(t, 11, insts, oracle, clock, 1500, nil)
				if st := sumStats(insts); st.Leases == 0 || st.LocalDecisions == 0 {
					t.Fatalf("nothing leased: %+v", st)
				}
			})
		}
	}
	t.Run("kill-restart", func(t *testing.T) { leaseClusterKill(t, cl) })
}

// leaseClusterKill kills the master that owns some of 30 keys, each
// leased by one instance, and restarts it.
func leaseClusterKill(t *testing.T, cl *redistest.Cluster) {
	crdb, _ := clusterClients(t, cl.Addrs())
	ctx := context.Background()
	rate := floodgate.Rate{Limit: 40, Period: time.Hour}
	clock := floodgatetest.NewClock(leaseEpoch)
	p := prefix(t)
	l, err := redisstore.NewTokenBucket(goredisstore.New(crdb), rate, redisstore.WithClock(clock.Now), redisstore.WithPrefix(p),
		redisstore.WithTimeout(500*time.Millisecond), redisstore.WithLease(quarter))
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{}
	victim := cl.Servers[0]
	for i := 0; i < 30; i++ {
		key := fmt.Sprintf("k%d", i)
		for j := 0; j < 4; j++ {
			mustAllowN(t, l, key, 1, true)
		}
		node, err := crdb.MasterForKey(ctx, p+":{"+key+"}:tb")
		if err != nil {
			t.Fatal(err)
		}
		owner[key] = node.Options().Addr
	}
	victim.Stop()
	onVictim := 0
	for key, addr := range owner {
		// Each key holds 3 units (leases of 1, 2 and 4): spent locally.
		for j := 0; j < 3; j++ {
			mustAllowN(t, l, key, 1, true)
		}
		d, err := l.AllowN(ctx, key, 1)
		switch {
		case addr == victim.Addr:
			onVictim++
			if d.Allowed || !errors.Is(err, redisstore.ErrRedis) {
				t.Fatalf("%s on the killed master: %+v, %v; want ErrRedis", key, d, err)
			}
		case err != nil || !d.Allowed:
			t.Fatalf("%s on a live master: %+v, %v", key, d, err)
		}
	}
	if onVictim == 0 || onVictim == len(owner) {
		t.Fatalf("%d of %d keys on the killed master: the test needs some on each side", onVictim, len(owner))
	}
	if err := victim.Restart(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for key, addr := range owner {
		if addr != victim.Addr {
			continue
		}
		for {
			d, err := l.AllowN(ctx, key, 1)
			if err == nil && d.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no decision from the restarted master: %+v, %v", key, d, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestLeaseWaitReplicasUnacknowledged: with WithWaitReplicas and a replica
// that acknowledges nothing, a lease the master granted could be lost in
// a failover, so the instance never allows from it: every allowed
// decision fails with ErrNotReplicated as in the plain mode, nothing is
// allowed locally, and a denial stays a denial.
func TestLeaseWaitReplicasUnacknowledged(t *testing.T) {
	ctx := context.Background()
	for _, c := range unackedMaster(t) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				clock := floodgatetest.NewClock(leaseEpoch)
				l, err := a.redis(c.s, floodgate.PerHour(40), patient, redisstore.WithClock(clock.Now),
					redisstore.WithPrefix(prefix(t)), redisstore.WithLease(redisstore.Lease{MaxShare: 1}))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 60; i++ {
					d, err := l.AllowN(ctx, "k", 1)
					switch {
					case d.Allowed:
						t.Fatalf("decision %d allowed although nothing was acknowledged: %+v", i, d)
					case err == nil && d.RetryAfter > 0:
						// Denied: the master charged the whole quota by now.
					case !errors.Is(err, redisstore.ErrNotReplicated):
						t.Fatalf("decision %d: %+v, %v; want ErrNotReplicated or a denial", i, d, err)
					}
				}
				if s := l.LeaseStats(); s.LocalDecisions != 0 {
					t.Fatalf("%+v: allowed from an unacknowledged lease", s)
				}
			})
		}
	}
}

// unackedAfter wraps a Scripter: once off is set, every script's reply
// comes with ErrNotReplicated, as an adapter's does when WAIT times out.
type unackedAfter struct {
	redisstore.Scripter
	off atomic.Bool
}

func (u *unackedAfter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	r, err := u.Scripter.EvalSha(ctx, sha, keys, args)
	return u.wrap(r, err)
}

func (u *unackedAfter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	r, err := u.Scripter.Eval(ctx, src, keys, args)
	return u.wrap(r, err)
}

func (u *unackedAfter) wrap(r []int64, err error) ([]int64, error) {
	if err == nil && u.off.Load() {
		return r, fmt.Errorf("WAIT 1: 0 replicas: %w", redisstore.ErrNotReplicated)
	}
	return r, err
}

// TestLeaseUnacknowledgedLeaseUnused: a hot key leases while the replicas
// acknowledge; then they stop. The instance allows what it already held,
// and not one unit of a lease granted after: those come back as
// ErrNotReplicated, as plain decisions do.
func TestLeaseUnacknowledgedLeaseUnused(t *testing.T) {
	addr := redistest.Shared(t)
	ctx := context.Background()
	for _, c := range leaseClients(t, addr) {
		for _, a := range leaseAlgos {
			t.Run(c.name+"/"+a.name, func(t *testing.T) {
				s := &unackedAfter{Scripter: c.s}
				clock := floodgatetest.NewClock(leaseEpoch)
				l, err := a.redis(s, floodgate.PerHour(400), patient, redisstore.WithClock(clock.Now),
					redisstore.WithPrefix(prefix(t)), redisstore.WithLease(redisstore.Lease{MaxShare: 4}))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 20; i++ {
					mustAllowN(t, l, "k", 1, true)
				}
				h := held(l)
				s.off.Store(true)
				allowed, unacked := 0, 0
				for i := 0; i < 100; i++ {
					d, err := l.AllowN(ctx, "k", 1)
					switch {
					case err == nil && d.Allowed:
						allowed++
					case errors.Is(err, redisstore.ErrNotReplicated) && !d.Allowed:
						unacked++
					case err == nil && d.RetryAfter > 0:
						// Denied: unused leases were charged on the master.
					default:
						t.Fatalf("request %d: %+v, %v", i, d, err)
					}
				}
				if allowed > h || unacked == 0 {
					t.Fatalf("%d allowed after the replicas stopped, holding %d; %d unacknowledged: "+
						"units of an unacknowledged lease were allowed", allowed, h, unacked)
				}
			})
		}
	}
}
