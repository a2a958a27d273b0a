package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/floodgatetest"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
)

// leaseReshardMode is how the clock of a TestLeaseClusterReshard run
// moves between rounds, and the rate that keeps its keys short of quota.
type leaseReshardMode struct {
	name string
	rate floodgate.Rate
	step func(rng *rand.Rand) time.Duration
}

var leaseReshardModes = []leaseReshardMode{
	// Frozen: nothing refills, so every unit Redis charged is accounted
	// for at the end (allowed, stranded or still held).
	// Enough quota to lease throughout the move.
	{"frozen", floodgate.Rate{Limit: 3000, Period: time.Hour},
		func(*rand.Rand) time.Duration { return 0 }},
	// Moving: 0–200 ms between rounds, about 2 units of refill a round
	// against 9 asked per key; the counter crosses a window every 20
	// rounds or so.
	{"moving", floodgate.Rate{Limit: 40, Period: 2 * time.Second},
		func(rng *rand.Rand) time.Duration { return time.Duration(rng.IntN(200)) * time.Millisecond }},
}

// TestLeaseClusterReshard (issue 23) is TestClusterReshard under leases:
// 20 hash slots move from one master of a three-master Cluster to another
// while three instances that lease, three goroutines each, decide on 20
// client keys of those slots, on both clients, for the token bucket and
// the sliding counter. Decisions run in rounds at frozen instants of a
// fake clock; every round's allowed units are replayed, at that instant,
// into one exact in-memory limiter, which must allow them all (never over
// the limit), and no decision may fail. With the clock frozen throughout,
// the instances then spend what they hold until Redis denies each of
// them, and what Redis charged must equal what was allowed plus what
// leases stranded: a lease charged twice (a script retried after ASK or
// TRYAGAIN) or charged on a node that lost it would break the sum.
func TestLeaseClusterReshard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	cl := redistest.StartCluster(t)
	crdb, rc := clusterClients(t, cl.Addrs())
	keys, slots, owner := reshardKeys(t, cl, 20)
	for _, c := range []client{{"go-redis", goredisstore.New(crdb)}, {"rueidis", rueidisstore.New(rc)}} {
		for _, a := range leaseAlgos {
			for _, m := range leaseReshardModes {
				t.Run(c.name+"/"+a.name+"/"+m.name, func(t *testing.T) {
					clock := floodgatetest.NewClock(leaseEpoch)
					p := prefix(t)
					insts := a.instances(t, 3, c.s, m.rate, redisstore.WithClock(clock.Now),
						redisstore.WithPrefix(p), redisstore.WithLease(quarter))
					oracle := a.oracle(t, m.rate, clock)
					to := (owner + 1) % 3
					asked := askings(t, cl)
					run := leaseDuringReshard(insts, oracle, clock, keys, m.step, func() {
						for _, s := range slots {
							cl.MoveSlot(t, s, owner, to, 10*time.Millisecond)
						}
					})
					owner = to
					t.Logf("%d decisions followed an ASK redirection to the importing node", askings(t, cl)-asked)
					checkLeaseReshard(t, run, insts)
					if m.name == "frozen" {
						checkLeaseCharges(t, a, c.s, leaseCharge{insts, oracle, keys, m.rate, p, clock, run})
					}
				})
			}
		}
	}
}

// leaseReshardRun tallies one TestLeaseClusterReshard run.
type leaseReshardRun struct {
	rounds, decisions, failed int
	allowed                   map[string]int
	errs                      []error // the first few failures and excesses
	over                      int     // grants the exact limiter denied
	moved                     time.Duration
}

func (r *leaseReshardRun) note(err error) {
	if len(r.errs) < 5 {
		r.errs = append(r.errs, err)
	}
}

// leaseDuringReshard runs rounds of decisions on keys through insts until
// move has returned (at least three), replays each round's grants into
// oracle, and moves clock by step between rounds.
func leaseDuringReshard(insts []leased, oracle floodgate.Limiter, clock *floodgatetest.Clock, keys []string,
	step func(*rand.Rand) time.Duration, move func()) *leaseReshardRun {
	run := &leaseReshardRun{allowed: map[string]int{}}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(23, 10))
		for ; ; run.rounds++ {
			select {
			case <-stop:
				if run.rounds >= 3 {
					return
				}
			default:
			}
			leaseRound(run, insts, oracle, keys)
			clock.Advance(step(rng))
		}
	}()
	// Deferred, so that the rounds stop also when move fails the test.
	defer func() {
		close(stop)
		<-done
	}()
	start := time.Now()
	move()
	run.moved = time.Since(start)
	return run
}

// leaseRound runs one round at the clock's instant: each instance's three
// goroutines ask for every key once, one unit in four requests, two or
// three in the others, so that a lease often holds fewer units than the
// next request and gives its tail back with the next lease.
func leaseRound(run *leaseReshardRun, insts []leased, oracle floodgate.Limiter, keys []string) {
	const goroutines = 3
	cost := func(i, g, j int) int { return []int{1, 1, 2, 3}[(i+g+j+run.rounds)%4] }
	got, errs := roundAllowed(insts, keys, goroutines, len(keys), cost)
	run.decisions += len(insts) * goroutines * len(keys)
	run.failed += len(errs)
	for _, err := range errs {
		run.note(err)
	}
	for key, n := range got {
		run.allowed[key] += n
		if d, err := oracle.AllowN(context.Background(), key, n); err != nil || !d.Allowed {
			run.over++
			run.note(fmt.Errorf("round %d: %d units of %q allowed at one instant, which the exact limiter denies (%+v, %v)",
				run.rounds, n, key, d, err))
		}
	}
}

// checkLeaseReshard fails t on a failed decision or a grant over the
// limit, and when the run leased nothing (it would prove nothing).
func checkLeaseReshard(t *testing.T, run *leaseReshardRun, insts []leased) {
	t.Helper()
	st := sumStats(insts)
	t.Logf("slots moved in %v: %d rounds, %d decisions, %d failed, %d over; %+v",
		run.moved.Round(time.Millisecond), run.rounds, run.decisions, run.failed, run.over, st)
	if run.failed > 0 || run.over > 0 {
		t.Fatalf("%d decisions failed and %d grants went over the limit during the reshard; first: %v", run.failed, run.over, run.errs)
	}
	if st.Leases == 0 || st.LocalDecisions == 0 {
		t.Fatalf("nothing leased during the reshard: %+v", st)
	}
}

// leaseCharge is what checkLeaseCharges needs of a frozen run.
type leaseCharge struct {
	insts  []leased
	oracle floodgate.Limiter
	keys   []string
	rate   floodgate.Rate
	prefix string
	clock  *floodgatetest.Clock
	run    *leaseReshardRun
}

// checkLeaseCharges spends, key by key, what each instance still holds
// until Redis denies it (checked against the oracle too), so that no
// instance holds a unit, and then compares what Redis charged with what
// the instances allowed and stranded, on a clock that never moved.
func checkLeaseCharges(t *testing.T, a leaseAlgo, s redisstore.Scripter, c leaseCharge) {
	t.Helper()
	ctx := context.Background()
	allowed := 0
	for _, key := range c.keys {
		for _, l := range c.insts {
			n := allowUntilDenied(t, l, key, c.rate.Limit)
			if d, err := c.oracle.AllowN(ctx, key, n); n > 0 && (err != nil || !d.Allowed) {
				t.Fatalf("%q: %d more units allowed after the reshard, which the exact limiter denies (%+v, %v)", key, n, d, err)
			}
			allowed += n
		}
		allowed += c.run.allowed[key]
	}
	for i, l := range c.insts {
		if h := held(l); h != 0 {
			t.Fatalf("instance %d still holds %d units after Redis denied it every key", i, h)
		}
	}
	plain, err := a.redis(s, c.rate, patient, redisstore.WithPrefix(c.prefix), redisstore.WithClock(c.clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	charged := 0
	for _, key := range c.keys {
		d, err := plain.AllowN(ctx, key, 0)
		if err != nil {
			t.Fatal(err)
		}
		charged += c.rate.Limit - d.Remaining
	}
	st := sumStats(c.insts)
	t.Logf("%d keys × %d: %d charged in Redis, %d allowed, %d stranded, %d skipped ahead",
		len(c.keys), c.rate.Limit, charged, allowed, st.StrandedUnits, st.AheadUnits)
	if want := allowed + int(st.StrandedUnits+st.AheadUnits) + st.ReturningUnits; charged != want {
		t.Fatalf("Redis charged %d units, the instances allowed %d, stranded %d and have %d waiting to go back (skipped %d ahead): want charged = %d",
			charged, allowed, st.StrandedUnits, st.ReturningUnits, st.AheadUnits, want)
	}
}

// askings returns the ASKING commands the nodes of cl have served: each is
// a client following an ASK redirection, to a key of a slot being moved
// that is already on the importing node.
func askings(t *testing.T, cl *redistest.Cluster) int {
	t.Helper()
	total := 0
	for _, s := range cl.Servers {
		info, err := redistest.Info(s.Addr, "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(info, "cmdstat_asking:calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %q", s.Addr, info)
		}
		total += calls
	}
	return total
}
