package floodgate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// byWho keys a request by its ?who=.
func byWho(t *testing.T) floodgate.KeyFunc {
	t.Helper()
	k, err := floodgate.KeyByQuery("who")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// debtKinds builds each limiter that charges beyond its quota at r.
func debtKinds(r floodgate.Rate) map[string]func(...floodgate.Option) (floodgate.Limiter, error) {
	return map[string]func(...floodgate.Option) (floodgate.Limiter, error){
		"TokenBucket":    func(o ...floodgate.Option) (floodgate.Limiter, error) { return floodgate.NewTokenBucket(r, o...) },
		"SlidingLog":     func(o ...floodgate.Option) (floodgate.Limiter, error) { return floodgate.NewSlidingLog(r, o...) },
		"SlidingCounter": func(o ...floodgate.Option) (floodgate.Limiter, error) { return floodgate.NewSlidingCounter(r, o...) },
	}
}

// The honest client with one wild estimate, and the attacker whose calls
// all cost far more than they say, on 10 a second: a reported cost of
// 2^24 (before: a Retry-After of 19 days, only Reset freed the key) now
// costs the hour DefaultDebtLimits allow per call, and the settlement
// says it was capped; the ten such calls in flight an attacker gets past
// its quota cost ten hours, and thirty the day they allow in all, no
// more. Every algorithm (the honest client through the middleware).
func TestHugeCostIsBounded(t *testing.T) {
	r := floodgate.Rate{Limit: 10, Period: time.Second}
	for name, build := range debtKinds(r) {
		t.Run(name, func(t *testing.T) {
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			l, err := build(floodgate.WithClock(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			var events []floodgate.DecisionEvent
			mw, err := floodgate.NewMiddleware(l, floodgate.WithKeyFunc(byWho(t)),
				floodgate.WithCostAfter(floodgate.CostReported),
				floodgate.WithDecisionHook(func(ev floodgate.DecisionEvent) { events = append(events, ev) }))
			if err != nil {
				t.Fatal(err)
			}
			h := mw(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				_ = floodgate.ReportCost(r.Context(), 1<<24)
			}))
			serveOnce(h, "/?who=honest")
			if n := len(events); n != 2 || !events[1].AfterHandler || !events[1].DebtCapped || events[1].Err != nil || events[1].Charged != 1<<24-1 {
				t.Fatalf("events %+v: want the settlement charging 2^24-1, capped, no error", events)
			}
			d, _ := l.AllowN(context.Background(), "honest", 1)
			if d.Allowed || d.RetryAfter < time.Hour-2*time.Second || d.RetryAfter > time.Hour+2*time.Second {
				t.Errorf("one huge cost: %+v, want denied about an hour", d)
			}
			// The attacker: twenty calls admitted before any settles.
			ctx := context.Background()
			for range 20 {
				if d, err := l.AllowN(ctx, "attacker", 0); err != nil || !d.Allowed {
					t.Fatal(d, err)
				}
			}
			for range 10 {
				if d, _ := l.AllowN(ctx, "attacker", 1); !d.Allowed {
					t.Fatalf("the attacker's estimate denied: %+v", d)
				}
			}
			ch := l.(floodgate.Charger)
			for range 10 { // the ten in flight: an hour each
				if err := ch.ChargeN(ctx, "attacker", 1<<24); !errors.Is(err, floodgate.ErrDebtCapped) {
					t.Fatalf("a huge cost: %v, want ErrDebtCapped", err)
				}
			}
			d, _ = l.AllowN(ctx, "attacker", 1)
			if d.Allowed || d.RetryAfter < 10*time.Hour-2*time.Second || d.RetryAfter > 10*time.Hour+2*time.Second {
				t.Errorf("ten huge costs in flight: %+v, want denied about ten hours", d)
			}
			for range 20 { // more than a day's worth: capped at the day
				if err := ch.ChargeN(ctx, "attacker", 1<<24); !errors.Is(err, floodgate.ErrDebtCapped) {
					t.Fatalf("a huge cost: %v, want ErrDebtCapped", err)
				}
			}
			d, _ = l.AllowN(ctx, "attacker", 1)
			if d.Allowed || d.RetryAfter < 24*time.Hour-2*time.Second || d.RetryAfter > 24*time.Hour+2*time.Second {
				t.Errorf("thirty huge costs: %+v, want denied about a day, no more", d)
			}
			now = now.Add(d.RetryAfter)
			if d, _ := l.AllowN(ctx, "attacker", 1); !d.Allowed {
				t.Errorf("still denied once the day was paid: %+v", d)
			}
		})
	}
}

// The limits never forgive below what the limit promises: with limits
// of a nanosecond, a charge of the whole quota is still charged in full
// and waits a whole period, and one above it is capped there.
func TestDebtLimitsNeverBelowTheQuota(t *testing.T) {
	r := floodgate.Rate{Limit: 10, Period: time.Minute}
	for name, build := range debtKinds(r) {
		t.Run(name, func(t *testing.T) {
			now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			l, err := build(floodgate.WithClock(func() time.Time { return now }),
				floodgate.WithMaxDebt(floodgate.DebtLimits{PerCall: time.Nanosecond, Total: time.Nanosecond}))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			ch := l.(floodgate.Charger)
			if err := ch.ChargeN(ctx, "k", 10); err != nil {
				t.Fatalf("a charge of the quota: %v", err)
			}
			if err := ch.ChargeN(ctx, "k", 10); err != nil {
				t.Fatalf("a debt of one quota: %v", err)
			}
			if err := ch.ChargeN(ctx, "k", 1); !errors.Is(err, floodgate.ErrDebtCapped) {
				t.Fatalf("beyond one quota of debt: %v, want ErrDebtCapped", err)
			}
			d, _ := l.AllowN(ctx, "k", 1)
			if d.Allowed || d.RetryAfter < time.Minute {
				t.Errorf("a quota owed: %+v, want denied a minute at least", d)
			}
		})
	}
}

// WithMaxDebt refuses limits no limiter can hold, and limiters that
// charge nothing.
func TestWithMaxDebtRefusals(t *testing.T) {
	r := floodgate.PerMinute(10)
	for _, l := range []floodgate.DebtLimits{
		{}, {PerCall: time.Hour}, {PerCall: -1, Total: time.Hour},
		{PerCall: 2 * time.Hour, Total: time.Hour},
		{PerCall: time.Hour, Total: floodgate.MaxDebtLimit + 1},
	} {
		if _, err := floodgate.NewTokenBucket(r, floodgate.WithMaxDebt(l)); !errors.Is(err, floodgate.ErrInvalidOption) {
			t.Errorf("%+v: %v, want ErrInvalidOption", l, err)
		}
	}
	ok := floodgate.WithMaxDebt(floodgate.DefaultDebtLimits)
	if _, err := floodgate.NewInFlight(3, ok); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("an in-flight limit: %v, want ErrInvalidOption", err)
	}
	if _, err := floodgate.NewSlidingLog(r, ok, ok); !errors.Is(err, floodgate.ErrInvalidOption) {
		t.Errorf("given twice: %v, want ErrInvalidOption", err)
	}
}

// A capped charge is logged once per gate at WARN, however many come.
func TestDebtCappedLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	l, err := floodgate.NewTokenBucket(floodgate.PerSecond(10), floodgate.WithClock(func() time.Time { return frozenAt }))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := floodgate.NewMiddleware(l, floodgate.WithKeyFunc(byWho(t)),
		floodgate.WithCostAfter(floodgate.CostReported), floodgate.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(reportingHandler(t))
	for _, who := range []string{"a", "b", "c"} {
		serveOnce(h, "/?who="+who+"&cost=100000")
	}
	var warns []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(m["msg"].(string), "WithMaxDebt") {
			warns = append(warns, m)
		}
	}
	if len(warns) != 1 || warns[0]["level"] != "WARN" || warns[0]["key"] != "a" {
		t.Errorf("capped-charge lines %v, want one WARN, for the first key", warns)
	}
}
