package floodgate

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// FuzzQuotaHeaders formats the quota headers for arbitrary policy names and
// decisions and parses them back with the strict RFC 9651 parser of
// response_test.go: every name the middleware accepts must come back
// unchanged, every value as an Integer equal to what was formatted, and
// names it refuses must be refused with ErrInvalidOption, not sent.
// Decisions no honest limiter produces (negative counts and waits,
// Remaining above Limit, waits near MaxInt64) must still give headers
// that do not lie: counts within [0, q], t within [0, w], no wrap.
func FuzzQuotaHeaders(f *testing.F) {
	f.Add("default", 10, 3, int64(0), int64(42*time.Second), int64(10*time.Minute), 10, true, uint8(0))
	f.Add(`say "hi" \ back`, 5, 0, int64(1500*time.Millisecond), int64(time.Minute), int64(time.Minute), 5, false, uint8(2))
	f.Add("nickname", 1<<24, 1<<24, int64(-1), int64(1), int64(1<<62), 3, true, uint8(1))
	f.Add("é", 1, 0, int64(0), int64(0), int64(time.Second), 1, false, uint8(0))
	f.Add("", 0, 0, int64(0), int64(0), int64(0), 0, false, uint8(3))
	f.Add("default", 10, -5, int64(math.MaxInt64), int64(math.MaxInt64), int64(time.Minute), 10, false, uint8(2))
	f.Add("default", 10, 1<<40, int64(-1), int64(time.Minute+49), int64(time.Minute), 10, true, uint8(2))
	f.Fuzz(func(t *testing.T, name string, limit, remaining int, retryNS, resetNS, periodNS int64, rateLimit int, allowed bool, style uint8) {
		if err := validPolicyName(name); err != nil {
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("validPolicyName(%q) = %v, not ErrInvalidOption", name, err)
			}
			if _, err := NewPolicySelector(Policy{Name: name, Limiter: nopLimiter{}, Key: KeyByMethod()}); err == nil {
				t.Fatalf("a policy named %q was accepted", name)
			}
			return
		}
		d := Decision{Allowed: allowed, Limit: limit, Remaining: remaining,
			RetryAfter: time.Duration(retryNS), ResetAfter: time.Duration(resetNS)}
		p := &policy{Name: name, quoted: quotedSFString(name)}
		rate := Rate{Limit: rateLimit, Period: time.Duration(periodNS)}
		if rate.Validate() != nil {
			rate = Rate{}
		}
		hs := HeaderStyle(style % 4)
		h := http.Header{}
		now := time.Unix(1_700_000_000, 0)
		var q Quota
		p.quota(&quotaRequest{style: hs, d: &d, retry: !allowed, rate: rate, now: func() time.Time { return now }}, &q)
		writeQuota(h, &q)

		if !allowed {
			if got, want := h.Get("Retry-After"), strconv.FormatInt(RetryAfterSeconds(d.RetryAfter), 10); got != want {
				t.Fatalf("Retry-After = %q, want %q", got, want)
			}
		}
		if hs.ietf() {
			pol := parseOne(t, h, "RateLimit-Policy", name)
			if pol.params["q"] != int64(max(limit, 0)) {
				t.Fatalf("RateLimit-Policy q = %d, want %d", pol.params["q"], max(limit, 0))
			}
			if w, ok := pol.params["w"]; ok && w <= 0 {
				t.Fatalf("RateLimit-Policy w = %d: not a positive window", w)
			}
			rl := parseOne(t, h, "RateLimit", name)
			if want := min(max(remaining, 0), max(limit, 0)); rl.params["r"] != int64(want) {
				t.Fatalf("RateLimit r = %d, want %d", rl.params["r"], want)
			}
			wantT := ceilSeconds(d.ResetAfter)
			if !allowed {
				wantT = RetryAfterSeconds(d.RetryAfter)
			}
			if w, ok := pol.params["w"]; ok && wantT > w {
				wantT = w // t never exceeds the window
			}
			if rl.params["t"] != wantT || wantT < 0 {
				t.Fatalf("RateLimit t = %d, want %d", rl.params["t"], wantT)
			}
		} else if h.Get("RateLimit") != "" || h.Get("RateLimit-Policy") != "" {
			t.Fatalf("style %d set IETF headers: %v", hs, h)
		}
		if hs.legacy() {
			if got := h.Get("X-RateLimit-Limit"); got != strconv.Itoa(max(limit, 0)) {
				t.Fatalf("X-RateLimit-Limit = %q, want %d", got, max(limit, 0))
			}
			reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
			if err != nil || reset < now.Unix() || reset > now.Unix()+9223372037 {
				t.Fatalf("X-RateLimit-Reset = %q: not an epoch second at or after now", h.Get("X-RateLimit-Reset"))
			}
		}
	})
}

// parseOne parses header key as a one-member structured list named name.
func parseOne(t *testing.T, h http.Header, key, name string) sfItem {
	t.Helper()
	vals := h.Values(key)
	if len(vals) != 1 {
		t.Fatalf("%s has %d values, want 1: %q", key, len(vals), vals)
	}
	items, err := parseSFList(vals[0])
	if err != nil {
		t.Fatalf("%s: %q does not parse as a structured field: %v", key, vals[0], err)
	}
	if len(items) != 1 || items[0].name != name {
		t.Fatalf("%s: %q parsed to %+v, want one item named %q", key, vals[0], items, name)
	}
	return items[0]
}

// nopLimiter allows everything; it only gives NewPolicySelector a Limiter.
type nopLimiter struct{}

func (nopLimiter) AllowN(_ context.Context, _ string, _ int) (Decision, error) {
	return Decision{Allowed: true}, nil
}
