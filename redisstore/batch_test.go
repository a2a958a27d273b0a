package redisstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
	"github.com/floodgate-go/floodgate/redisstore/internal/scriptbatch"
	"github.com/redis/go-redis/v9"
)

// scriptCall is one Scripter call a limiter made, and what it got.
type scriptCall struct {
	eval       bool // EVAL of the source; EVALSHA of the digest otherwise
	script     string
	keys, args []string
	reply      []int64
	err        error
	raw        []string // instead of a script: a command the test sent
}

// recorder passes a limiter's script calls on and records them.
type recorder struct {
	redisstore.Scripter
	mu    sync.Mutex
	calls []scriptCall
}

func (r *recorder) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	reply, err := r.Scripter.EvalSha(ctx, sha, keys, args)
	r.record(scriptCall{script: sha, keys: keys, args: args, reply: reply, err: err})
	return reply, err
}

func (r *recorder) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	reply, err := r.Scripter.Eval(ctx, src, keys, args)
	r.record(scriptCall{eval: true, script: src, keys: keys, args: args, reply: reply, err: err})
	return reply, err
}

func (r *recorder) record(c scriptCall) {
	c.keys, c.args = slices.Clone(c.keys), slices.Clone(c.args)
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

// TestBatchScriptMatchesSingleCalls holds each batch script to its
// decision script: a limiter's calls, made one at a time on one prefix
// and recorded, are replayed on another prefix with the decision calls
// grouped into batches of 1 to 12 entries, and every entry must get the
// reply its call got, integer for integer. The traffic crosses what a
// decision meets: random costs and times on a client clock, changes of
// rate (each strategy), a second plan's decisions on the same keys, and a
// key holding a malformed state, whose entries fail alone while the rest
// of their batch runs. Every algorithm.
func TestBatchScriptMatchesSingleCalls(t *testing.T) {
	addr := redistest.Shared(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	type planner interface {
		AllowPlanN(ctx context.Context, key string, n int, how floodgate.Inherit) (floodgate.Decision, error)
	}
	for _, alg := range planAlgos {
		t.Run(alg.name, func(t *testing.T) {
			rec := &recorder{Scripter: goRedis(t, addr).s}
			clock := &atomicClock{}
			clock.us.Store(t0.UnixMicro())
			pa := prefix(t)
			opts := []redisstore.Option{redisstore.WithPrefix(pa), redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Millisecond), patient}
			base := floodgate.Plan{Name: "a", Rate: floodgate.Rate{Limit: 7, Period: time.Minute}}
			other := floodgate.Plan{Name: "b", Rate: floodgate.Rate{Limit: 11, Period: time.Minute}}
			l, err := alg.redis(rec, base, opts...)
			mustNot(t, err)
			l2, err := alg.redis(rec, other, opts...)
			mustNot(t, err)
			keys := []string{"a", "b", "c", "bad"}
			badKey := func(p string) string {
				k := p + ":{bad}:"
				switch alg.name {
				case "TokenBucket":
					return k + "tb"
				case "TokenBucket/IntervalRefill":
					return k + "tbi"
				case "SlidingLog":
					return k + "log"
				}
				return k + "sc"
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(alg.name))))
			limit := 7
			for step := 0; step < 400; step++ {
				key := keys[rng.IntN(len(keys))]
				switch x := rng.IntN(100); {
				case x < 3:
					limit = 3 + rng.IntN(12)
					how := floodgate.Inherit(rng.IntN(int(floodgate.StartFresh) + 1))
					mustNot(t, l.(rateSetter).SetRate(ctx, floodgate.RateChange{Rate: floodgate.Rate{Limit: limit, Period: time.Minute}, Inherit: how}))
				case x < 15:
					_, _ = l2.(planner).AllowPlanN(ctx, key, rng.IntN(3), floodgate.KeepUsed)
				case x < 17:
					// A malformed state: its decisions fail, alone.
					rec.record(scriptCall{raw: []string{"SET", badKey(pa), "garbage|x"}})
					mustNot(t, rdb.Set(ctx, badKey(pa), "garbage|x", 0).Err())
				default:
					_, _ = l.AllowN(ctx, key, rng.IntN(3))
				}
				clock.us.Add(rng.Int64N(int64(5 * time.Second / time.Microsecond)))
			}

			// Replay on another prefix, the decision calls in batches.
			pb := prefix(t)
			rewrite := func(keys []string) []string {
				out := make([]string, len(keys))
				for i, k := range keys {
					out[i] = strings.Replace(k, pa, pb, 1)
				}
				return out
			}
			// A call answered NOSCRIPT did not run (the limiter then sent
			// EVAL, recorded after it).
			calls := slices.DeleteFunc(rec.calls, func(c scriptCall) bool { return errors.Is(c.err, redisstore.ErrNoScript) })
			batched, failed, converted := 0, 0, 0
			for _, c := range calls {
				if len(c.reply) > 0 && c.reply[0] < 0 {
					converted++ // a reply of rate_get: a state of another version or plan
				}
			}
			for i := 0; i < len(calls); {
				c := calls[i]
				bs := scriptbatch.Lookup(c.script)
				if c.raw != nil || c.eval || bs == nil {
					if c.raw != nil {
						args := make([]any, len(c.raw))
						for j, a := range c.raw {
							args[j] = strings.Replace(a, pa, pb, 1)
						}
						mustNot(t, rdb.Do(ctx, args...).Err())
					} else {
						var reply []int64
						var err error
						if c.eval {
							reply, err = rdb.Eval(ctx, c.script, rewrite(c.keys), toAnys(c.args)...).Int64Slice()
						} else {
							reply, err = rdb.EvalSha(ctx, c.script, rewrite(c.keys), toAnys(c.args)...).Int64Slice()
						}
						sameReply(t, i, c, reply, err)
					}
					i++
					continue
				}
				// Consecutive calls of this script, up to 12, in one batch.
				b := &scriptbatch.Batch{Script: bs}
				size := 1 + rng.IntN(12)
				for j := i; j < len(calls) && b.Len() < size && !calls[j].eval && calls[j].raw == nil && scriptbatch.Lookup(calls[j].script) == bs; j++ {
					b.Add(j, rewrite(calls[j].keys)[0], calls[j].args)
				}
				b.Finish()
				r, err := rdb.Eval(ctx, bs.Src, b.Keys, toAnys(b.Args)...).Int64Slice()
				mustNot(t, err)
				mustNot(t, scriptbatch.Split(r, b.Len(), func(j int, reply []int64, err error) {
					if err != nil {
						failed++
					}
					sameReply(t, b.Calls[j], calls[b.Calls[j]], reply, err)
				}))
				if b.Len() > 1 {
					batched += b.Len()
				}
				i += b.Len()
			}
			t.Logf("%d calls replayed, %d of them in batches of 2 or more, %d entries failed, %d met another rate", len(calls), batched, failed, converted)
			if batched < 200 || failed == 0 || (converted == 0 && alg.name != "SlidingLog") {
				t.Fatalf("%d calls in batches, %d failed entries, %d met another rate: the replay did not cover batches, failures and conversions", batched, failed, converted)
			}
		})
	}
}

// sameReply fails t unless reply and err are what call c got: the same
// integers, or an error both times.
func sameReply(t *testing.T, i int, c scriptCall, reply []int64, err error) {
	t.Helper()
	if (err != nil) != (c.err != nil) || !slices.Equal(reply, c.reply) {
		t.Fatalf("call %d (%v): replayed %v, %v; the call got %v, %v", i, c.args, reply, err, c.reply, c.err)
	}
}

func toAnys(s []string) []any {
	out := make([]any, len(s))
	for i, x := range s {
		out[i] = x
	}
	return out
}

// atomicClock is a fake clock safe for concurrent use, in microseconds.
type atomicClock struct{ us atomic.Int64 }

func (c *atomicClock) Now() time.Time { return time.UnixMicro(c.us.Load()) }

// TestBatchedDecisionsExact: 128 concurrent callers on 8 keys of a limit
// of 40 an hour, on the server's clock, go out in batch scripts (the
// server runs far fewer EVALSHA calls than decisions), and each key is
// allowed exactly 40 times, never more; a ninth key holds a malformed
// state, and its decisions fail alone, in the same batches as the others,
// which all succeed. Every algorithm, both clients.
func TestBatchedDecisionsExact(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	const callers, keys, each, limit = 128, 8, 200, 40
	for _, c := range clients(t, srv.Addr) {
		for _, alg := range planAlgos {
			t.Run(c.name+"/"+alg.name, func(t *testing.T) {
				p := prefix(t)
				l, err := alg.redis(c.s, floodgate.Plan{Rate: floodgate.PerHour(limit)}, redisstore.WithPrefix(p), patient)
				mustNot(t, err)
				suffix := map[string]string{"TokenBucket": "tb", "TokenBucket/IntervalRefill": "tbi", "SlidingLog": "log", "SlidingCounter": "sc"}[alg.name]
				bad := p + ":{bad}:" + suffix
				if alg.name == "SlidingLog" {
					mustNot(t, rdb.ZAdd(ctx, bad, redis.Z{Score: 1, Member: "garbage"}).Err())
				} else {
					mustNot(t, rdb.Set(ctx, bad, "garbage", 0).Err())
				}
				mustNot(t, rdb.ConfigResetStat(ctx).Err())
				var allowed [keys]atomic.Int64
				var badFailed, goodFailed atomic.Int64
				var firstErr atomic.Value
				var next atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < callers; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := next.Add(1) - 1; i < (keys+1)*each; i = next.Add(1) - 1 {
							k := int(i % (keys + 1))
							key := "bad"
							if k < keys {
								key = "k" + string(rune('a'+k))
							}
							d, err := l.AllowN(ctx, key, 1)
							switch {
							case k == keys && err != nil:
								badFailed.Add(1)
							case err != nil:
								goodFailed.Add(1)
								firstErr.CompareAndSwap(nil, err)
							case d.Allowed:
								allowed[k].Add(1)
							}
						}
					}()
				}
				wg.Wait()
				if n := goodFailed.Load(); n > 0 {
					t.Fatalf("%d decisions on good keys failed; first: %v", n, firstErr.Load())
				}
				if n := badFailed.Load(); n != each {
					t.Fatalf("%d of %d decisions on the malformed key failed, want all", n, each)
				}
				for k := range allowed {
					if n := allowed[k].Load(); n != limit {
						t.Errorf("key %d: %d allowed of %d, want exactly %d", k, n, each, limit)
					}
				}
				calls, _ := evalshaStats(t, srv.Addr)
				t.Logf("%d decisions in %d EVALSHA calls", (keys+1)*each, calls)
				if calls*4 > (keys+1)*each {
					t.Fatalf("%d decisions took %d EVALSHA calls: want at most a quarter as many (batch scripts)", (keys+1)*each, calls)
				}
			})
		}
	}
}

// TestBatchedCallersGiveUp: callers whose contexts end at random moments —
// before their call is sent, while it is queued for the next batch, and
// while the batch script carrying it is in flight (the server is paused
// now and then, so batches sit on it) — among callers who wait. Each call
// gets its own answer or its context's error, never another's: on every
// key, the units the server charged (read after the run) are at least
// those of the decisions callers were told were allowed and never more
// than the limit, and what was charged beyond them is at most what the
// callers who left asked for (a script that ran after its caller gave up
// charges once; a call withdrawn before its batch went out charges
// nothing). Keys have different costs, so a reply handed to the wrong
// entry shows. Every algorithm, both clients.
//
// A live caller's decision once failed on rueidis with
// context.DeadlineExceeded here (1–3 decisions of 640 in about 1 run in
// 10 under -race): another caller's context ended while its command was
// dialling a connection the live caller's command waited for
// (TestSharedDialSparesOthers).
func TestBatchedCallersGiveUp(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	const callers, keys, attempts, limit = 64, 4, 160, 60
	var chargedForGone atomic.Int64
	for _, c := range clients(t, srv.Addr) {
		for _, alg := range planAlgos {
			t.Run(c.name+"/"+alg.name, func(t *testing.T) {
				l, err := alg.redis(c.s, floodgate.Plan{Rate: floodgate.Rate{Limit: limit, Period: 24 * time.Hour}}, redisstore.WithPrefix(prefix(t)), patient)
				mustNot(t, err)
				mustNot(t, rdb.ConfigResetStat(context.Background()).Err())
				stop := make(chan struct{})
				paused := make(chan struct{})
				go func() {
					// Pause the server for 4 ms every 10 ms: batches sent
					// meanwhile are in flight when their callers' deadlines
					// pass.
					defer close(paused)
					for {
						select {
						case <-stop:
							return
						case <-time.After(6 * time.Millisecond):
						}
						_ = rdb.Do(context.Background(), "CLIENT", "PAUSE", 4, "ALL").Err()
					}
				}()
				var allowed, gone [keys]atomic.Int64
				var next atomic.Int64
				var wg sync.WaitGroup
				for g := 0; g < callers; g++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := next.Add(1) - 1; i < keys*attempts; i = next.Add(1) - 1 {
							k := int(i % keys)
							cost := k + 1
							ctx, cancel := context.WithCancel(context.Background())
							switch rand.IntN(4) {
							case 0, 1:
								ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rand.IntN(8000))*time.Microsecond)
							case 2:
								time.AfterFunc(time.Duration(rand.IntN(8000))*time.Microsecond, cancel)
							}
							d, err := l.AllowN(ctx, "k"+strconv.Itoa(k), cost)
							left := ctx.Err()
							if dl, ok := ctx.Deadline(); ok && left == nil && !time.Now().Before(dl) {
								// The socket's deadline can pass before
								// the context's timer reports it.
								left = context.DeadlineExceeded
							}
							cancel()
							switch {
							case err != nil && left != nil:
								// A deadline that passes on the socket is
								// go-redis's i/o timeout, wrapped in
								// ErrRedis; a hang-up is the caller's own.
								if errors.Is(left, context.Canceled) && !errors.Is(err, context.Canceled) {
									t.Errorf("key %d: a caller who hung up got %v, want context.Canceled", k, err)
								}
								gone[k].Add(1)
							case err != nil:
								t.Errorf("key %d: a live caller's decision failed: %v", k, err)
							case d.Limit != limit || d.Remaining < 0 || d.Remaining > limit:
								t.Errorf("key %d: decision %+v: not this limit's", k, d)
							case d.Allowed:
								allowed[k].Add(1)
							}
						}
					}()
				}
				wg.Wait()
				close(stop)
				<-paused
				calls, _ := evalshaStats(t, srv.Addr)
				var left, charged int64
				for k := 0; k < keys; k++ {
					d, err := l.AllowN(context.Background(), "k"+strconv.Itoa(k), 0)
					mustNot(t, err)
					cost := int64(k + 1)
					spent := int64(limit - d.Remaining)
					told := allowed[k].Load() * cost
					t.Logf("key %d (cost %d): %d units charged, %d told allowed, %d callers left", k, cost, spent, told, gone[k].Load())
					if told > limit {
						t.Errorf("key %d: %d units told allowed, over the limit of %d", k, told, limit)
					}
					if spent < told {
						t.Errorf("key %d: %d units charged, fewer than the %d units told allowed", k, spent, told)
					}
					if extra := spent - told; extra > gone[k].Load()*cost || extra%cost != 0 {
						t.Errorf("key %d: %d units charged beyond those told allowed, not the costs of some of the %d callers who left", k, extra, gone[k].Load())
					}
					left += gone[k].Load()
					charged += (spent - told) / cost
				}
				chargedForGone.Add(charged)
				t.Logf("%d decisions in %d EVALSHA calls; %d callers left, %d of them charged", keys*attempts, calls, left, charged)
				if left == 0 {
					t.Fatalf("no caller left before its answer: the test did not test it")
				}
			})
		}
	}
	if chargedForGone.Load() == 0 && !t.Failed() {
		t.Errorf("no caller was charged after it left: no batch was in flight when its callers' contexts ended, so that case went untested")
	}
}
