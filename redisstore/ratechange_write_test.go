package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/internal/redistest"
)

// These tests hold issue 29's ninth finding: SetRate on Redis has its own
// deadline, the caller's, and its outcome can be known.

// slowRecordScripter delays, or loses, the replies of the writes of a
// rate record (the scripts whose only key is p:rate:...): delay after the
// script ran, as a slow server or network would; lose replies with an
// error after the script ran (lost > 0: that many), or before it ran
// (refuse > 0).
type slowRecordScripter struct {
	redisstore.Scripter
	delay         time.Duration
	lost, refused atomic.Int64
}

func (s *slowRecordScripter) isWrite(keys, args []string) bool {
	return len(keys) == 1 && strings.Contains(keys[0], ":rate:") && len(args) > 1 && args[1] == "bump"
}

func (s *slowRecordScripter) wrap(ctx context.Context, keys, args []string, run func() ([]int64, error)) ([]int64, error) {
	if !s.isWrite(keys, args) {
		return run()
	}
	if s.refused.Load() > 0 {
		s.refused.Add(-1)
		return nil, errors.New("connection reset before the write was sent")
	}
	r, err := run()
	if s.lost.Load() > 0 {
		s.lost.Add(-1)
		return nil, errors.New("connection reset after the write was sent")
	}
	select {
	case <-time.After(s.delay):
		return r, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *slowRecordScripter) EvalSha(ctx context.Context, sha string, keys, args []string) ([]int64, error) {
	return s.wrap(ctx, keys, args, func() ([]int64, error) { return s.Scripter.EvalSha(ctx, sha, keys, args) })
}

func (s *slowRecordScripter) Eval(ctx context.Context, src string, keys, args []string) ([]int64, error) {
	return s.wrap(ctx, keys, args, func() ([]int64, error) { return s.Scripter.Eval(ctx, src, keys, args) })
}

// recordVersion returns the version the rate record of prefix p (a token
// bucket's) holds in Redis, 0 for none.
func recordVersion(t *testing.T, addr, p string) string {
	t.Helper()
	v, _, _ := strings.Cut(getKey(t, addr, p+":rate:tb"), " ")
	return v
}

// getKey returns the string at key, "" for none.
func getKey(t *testing.T, addr, key string) string {
	t.Helper()
	head, err := redistest.Do(addr, "GET", key)
	if err != nil {
		t.Fatal(err)
	}
	if head == "$-1" {
		return ""
	}
	s, err := redistest.Bulk(addr, "GET", key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSetRateOutlivesDecisionTimeout: a record write whose reply takes
// longer than the decision timeout (100 ms) is waited for under the
// caller's context, and SetRate succeeds. Before, it failed on the
// decision timeout although the write was made: the rate had changed and
// the caller was told it had not.
func TestSetRateOutlivesDecisionTimeout(t *testing.T) {
	addr := redistest.Shared(t)
	for _, cl := range clients(t, addr) {
		t.Run(cl.name, func(t *testing.T) {
			slow := &slowRecordScripter{Scripter: cl.s, delay: 250 * time.Millisecond}
			p := prefix(t)
			l, err := redisstore.NewTokenBucket(slow, floodgate.PerHour(10), redisstore.WithPrefix(p),
				redisstore.WithTimeout(100*time.Millisecond), redisstore.WithRateRefresh(time.Millisecond))
			mustNot(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := l.SetRate(ctx, floodgate.RateChange{Rate: floodgate.PerHour(20)}); err != nil {
				t.Fatalf("SetRate with a 250 ms reply under a 5 s context: %v", err)
			}
			if v := recordVersion(t, addr, p); v != "1" || l.Rate() != floodgate.PerHour(20) {
				t.Fatalf("record version %q, rate %v; want 1 and 20/h", v, l.Rate())
			}
		})
	}
}

// TestSetRateUnconfirmedIsSettledOnce: a write whose reply is lost,
// after it was made or before, returns ErrRateUnconfirmed (with ErrRedis);
// the same change sent again settles it with one version in Redis, never
// two, for a StartFresh that would forgive twice. A different change
// after that is a version of its own.
func TestSetRateUnconfirmedIsSettledOnce(t *testing.T) {
	addr := redistest.Shared(t)
	for _, cl := range clients(t, addr) {
		for _, when := range []string{"after", "before", "deadline"} {
			t.Run(cl.name+"/"+when, func(t *testing.T) {
				slow := &slowRecordScripter{Scripter: cl.s}
				p := prefix(t)
				clock := &fakeClock{t0}
				l, err := redisstore.NewTokenBucket(slow, floodgate.PerHour(10), redisstore.WithPrefix(p),
					redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Millisecond), patient)
				mustNot(t, err)
				for range 10 {
					mustAllowed(t, l, "k", 1, true)
				}
				change := floodgate.RateChange{Rate: floodgate.PerHour(10), Inherit: floodgate.StartFresh}
				ctx := context.Background()
				want := "1" // the write was made
				switch when {
				case "after":
					slow.lost.Store(1)
				case "before":
					slow.refused.Store(1)
					want = ""
				case "deadline":
					slow.delay = time.Second
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
					defer cancel()
				}
				err = l.SetRate(ctx, change)
				if !errors.Is(err, redisstore.ErrRateUnconfirmed) || !errors.Is(err, redisstore.ErrRedis) {
					t.Fatalf("SetRate whose reply was lost: %v, want ErrRateUnconfirmed and ErrRedis", err)
				}
				if v := recordVersion(t, addr, p); v != want {
					t.Fatalf("record version %q after the lost reply, want %q", v, want)
				}
				slow.delay = 0
				mustNot(t, l.SetRate(context.Background(), change))
				if v := recordVersion(t, addr, p); v != "1" {
					t.Fatalf("record version %q after the change was sent again, want 1: one change, made once", v)
				}
				// StartFresh made once: the key has its 10 again, not 20.
				for range 10 {
					mustAllowed(t, l, "k", 1, true)
				}
				mustAllowed(t, l, "k", 1, false)
				mustNot(t, l.SetRate(context.Background(), change))
				if v := recordVersion(t, addr, p); v != "2" {
					t.Fatalf("record version %q after a new call of the same change, want 2", v)
				}
			})
		}
	}
}

// TestRateRecordReadableAcrossReleases: a record of nine numbers, as an
// earlier release writes it, is read and changed; the record written
// then still holds nine numbers (the call's number is in letters), so an
// earlier release, which counts the digits, reads it too.
func TestRateRecordReadableAcrossReleases(t *testing.T) {
	addr := redistest.Shared(t)
	p := prefix(t)
	clock := &fakeClock{t0}
	old := fmt.Sprintf("1 20 3600000000 20 0 %d 10 3600000000 10", t0.UnixMicro())
	if _, err := redistest.Do(addr, "SET", p+":rate:tb", strconv.Quote(old)); err != nil {
		t.Fatal(err)
	}
	l, err := redisstore.NewTokenBucket(goRedis(t, addr).s, floodgate.PerHour(10), redisstore.WithPrefix(p),
		redisstore.WithClock(clock.Now), redisstore.WithRateRefresh(time.Millisecond), patient)
	mustNot(t, err)
	if d := mustAllowed(t, l, "k", 1, true); d.Limit != 20 {
		t.Fatalf("under an earlier release's record: %+v, want Limit 20", d)
	}
	mustNot(t, l.SetRate(context.Background(), floodgate.RateChange{Rate: floodgate.PerHour(30)}))
	rec := getKey(t, addr, p+":rate:tb")
	digits := regexp.MustCompile(`\d+`).FindAllString(rec, -1)
	if len(digits) != 9 || digits[0] != "2" || digits[1] != "30" || !strings.Contains(rec, " #") {
		t.Fatalf("record %q: want version 2 of 30 an hour, nine numbers and the call's number in letters", rec)
	}
}
