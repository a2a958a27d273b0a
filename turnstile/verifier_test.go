package turnstile_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/turnstile"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// newVerifier returns a verifier for secret that talks to f and expects
// the hostname example.com (opts may name others), with retries that wait
// a millisecond so that retry tests run fast.
func newVerifier(t *testing.T, f *fakeSiteverify, secret string, opts ...turnstile.Option) *turnstile.Verifier {
	t.Helper()
	return newVerifierFor(t, f, secret, turnstile.WithHostnames("example.com"), opts...)
}

// newVerifierFor is newVerifier with the hostname choice hosts.
func newVerifierFor(t *testing.T, f *fakeSiteverify, secret string, hosts turnstile.Option, opts ...turnstile.Option) *turnstile.Verifier {
	t.Helper()
	opts = append([]turnstile.Option{turnstile.WithEndpoint(f.url), turnstile.WithRetry(2, time.Millisecond), hosts}, opts...)
	v, err := turnstile.New(secret, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

func TestVerifyDummySecrets(t *testing.T) {
	tests := []struct {
		name      string
		secret    string
		wantErr   error
		wantCodes []string
	}{
		{"pass", secretPass, nil, nil},
		{"fail", secretFail, turnstile.ErrRejected, []string{turnstile.CodeInvalidInputResponse}},
		{"spent", secretSpent, turnstile.ErrRejected, []string{turnstile.CodeTimeoutOrDuplicate}},
		{"unknown secret", "0x4AAAAAAAnotARealSecret", turnstile.ErrMisconfigured, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.set(func(f *fakeSiteverify) { f.action, f.cdata = "signup", "session-42" })
			v := newVerifier(t, f, tt.secret)
			res, err := v.Verify(context.Background(), "XXXX.DUMMY.TOKEN.XXXX", "")
			if got := len(f.seen()); got != 1 {
				t.Errorf("siteverify calls = %d, want 1 (a definitive answer is never retried)", got)
			}
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				want := turnstile.Result{
					Success:     true,
					ChallengeTS: time.Date(2026, 12, 1, 8, 0, 0, 123e6, time.UTC),
					Hostname:    "example.com",
					Action:      "signup",
					CData:       "session-42",
					ErrorCodes:  []string{},
				}
				if !res.ChallengeTS.Equal(want.ChallengeTS) || res.Hostname != want.Hostname ||
					res.Action != want.Action || res.CData != want.CData || !res.Success || len(res.ErrorCodes) != 0 {
					t.Errorf("Result = %+v, want %+v", *res, want)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tt.wantErr)
			}
			if res != nil {
				t.Errorf("Result = %+v alongside an error, want nil", *res)
			}
			if tt.wantCodes != nil {
				var rej *turnstile.RejectedError
				if !errors.As(err, &rej) {
					t.Fatalf("error %v is not a *RejectedError", err)
				}
				if !slices.Equal(rej.Codes, tt.wantCodes) || rej.Result == nil || rej.Result.Success {
					t.Errorf("RejectedError = %+v, want codes %v and the failed Result", rej, tt.wantCodes)
				}
			}
		})
	}
}

func TestVerifyReplayedToken(t *testing.T) {
	f := newFake(t)
	v := newVerifier(t, f, secretPass)
	ctx := context.Background()
	if _, err := v.Verify(ctx, "token-A", ""); err != nil {
		t.Fatalf("first use: %v", err)
	}
	_, err := v.Verify(ctx, "token-A", "")
	var rej *turnstile.RejectedError
	if !errors.As(err, &rej) || !slices.Equal(rej.Codes, []string{turnstile.CodeTimeoutOrDuplicate}) {
		t.Fatalf("second use: error %v, want a rejection with %s", err, turnstile.CodeTimeoutOrDuplicate)
	}
	calls := f.seen()
	if len(calls) != 2 {
		t.Fatalf("siteverify calls = %d, want 2", len(calls))
	}
	if k1, k2 := calls[0].form.Get("idempotency_key"), calls[1].form.Get("idempotency_key"); k1 == k2 {
		t.Errorf("two verifications shared idempotency key %q; each must have its own", k1)
	}
}

func TestVerifyExpectations(t *testing.T) {
	tests := []struct {
		name     string
		hostname string // the fake's answer
		action   string
		opts     []turnstile.Option
		wantCode string // "" for success
	}{
		{"any hostname, deliberately", "evil.example", "other", nil, ""},
		{"hostname matches", "example.com", "", []turnstile.Option{turnstile.WithHostnames("www.example.com", "example.com")}, ""},
		{"hostname matches without regard to case", "Example.COM", "", []turnstile.Option{turnstile.WithHostnames("example.com")}, ""},
		{"wrong hostname", "evil.example", "", []turnstile.Option{turnstile.WithHostnames("example.com")}, turnstile.CodeHostnameMismatch},
		{"action matches", "example.com", "signup", []turnstile.Option{turnstile.WithAction("signup")}, ""},
		{"wrong action", "example.com", "login", []turnstile.Option{turnstile.WithAction("signup")}, turnstile.CodeActionMismatch},
		{"no action", "example.com", "", []turnstile.Option{turnstile.WithAction("signup")}, turnstile.CodeActionMismatch},
		{"right hostname, wrong action", "example.com", "login",
			[]turnstile.Option{turnstile.WithHostnames("example.com"), turnstile.WithAction("signup")}, turnstile.CodeActionMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.set(func(f *fakeSiteverify) { f.hostname, f.action = tt.hostname, tt.action })
			v := newVerifier(t, f, secretPass, tt.opts...)
			if tt.opts == nil {
				v = newVerifierFor(t, f, secretPass, turnstile.WithAnyHostname())
			}
			res, err := v.Verify(context.Background(), "token", "")
			if tt.wantCode == "" {
				if err != nil || res.Hostname != tt.hostname || res.Action != tt.action {
					t.Fatalf("Verify = %+v, %v; want success on %q/%q", res, err, tt.hostname, tt.action)
				}
				return
			}
			var rej *turnstile.RejectedError
			if !errors.As(err, &rej) || !errors.Is(err, turnstile.ErrRejected) {
				t.Fatalf("Verify error = %v, want a *RejectedError", err)
			}
			if !slices.Equal(rej.Codes, []string{tt.wantCode}) || rej.Reason == "" || rej.Result.Hostname != tt.hostname {
				t.Errorf("RejectedError = %+v, want code %s with a reason and the Result", rej, tt.wantCode)
			}
		})
	}
}

func TestVerifyMalformedAnswer(t *testing.T) {
	tests := []struct {
		name   string
		status int
		raw    string
	}{
		{"not JSON", 200, "<html>captive portal</html>"},
		{"truncated JSON", 200, `{"success": tru`},
		{"no success field", 200, `{"hostname": "example.com"}`},
		{"bad challenge_ts", 200, `{"success": true, "challenge_ts": "yesterday"}`},
		{"oversized answer", 200, `{"success": true, "cdata": "` + strings.Repeat("x", 70<<10) + `"}`},
		{"client error status without JSON", 404, "not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.set(func(f *fakeSiteverify) { f.status, f.raw = tt.status, []byte(tt.raw) })
			v := newVerifier(t, f, secretPass)
			res, err := v.Verify(context.Background(), "token", "")
			if !errors.Is(err, turnstile.ErrUnavailable) || res != nil {
				t.Fatalf("Verify = %v, %v; want ErrUnavailable", res, err)
			}
			if got := len(f.seen()); got != 1 {
				t.Errorf("siteverify calls = %d, want 1: an unreadable answer is not retried", got)
			}
		})
	}
}

func TestVerifyTimeout(t *testing.T) {
	f := newFake(t)
	f.set(func(f *fakeSiteverify) { f.block = true })
	v := newVerifier(t, f, secretPass, turnstile.WithTimeout(50*time.Millisecond))
	start := time.Now()
	_, err := v.Verify(context.Background(), "token", "")
	if !errors.Is(err, turnstile.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Verify error = %v, want ErrUnavailable wrapping context.DeadlineExceeded", err)
	}
	// A generous bound, not a timing assertion: without the timeout the
	// fake would hold the request forever.
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Verify took %s with a 50ms timeout", d)
	}
	var arrivals int
	f.set(func(f *fakeSiteverify) { arrivals = f.arrivals })
	if arrivals != 1 {
		t.Errorf("siteverify requests = %d, want 1: no retry once the deadline has passed", arrivals)
	}
}

func TestVerifyCallerContext(t *testing.T) {
	f := newFake(t)
	v := newVerifier(t, f, secretPass)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := v.Verify(ctx, "token", "")
	if errors.Is(err, turnstile.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Verify error = %v, want context.Canceled, not ErrUnavailable: the caller left, siteverify did not fail", err)
	}
	if got := len(f.seen()); got != 0 {
		t.Errorf("siteverify calls = %d with a cancelled context, want 0", got)
	}
}

func TestVerifyRetry(t *testing.T) {
	tests := []struct {
		name      string
		script    func(f *fakeSiteverify)
		retries   int
		wantErr   error
		wantCalls int
	}{
		{"internal-error then success", func(f *fakeSiteverify) { f.internalErrors = 1 }, 2, nil, 2},
		{"two internal-errors then success", func(f *fakeSiteverify) { f.internalErrors = 2 }, 2, nil, 3},
		// The first answer is lost after the token was spent: only the
		// reused idempotency key keeps the retry from reading
		// timeout-or-duplicate.
		{"lost answer", func(f *fakeSiteverify) { f.lostAnswers = 1 }, 2, nil, 2},
		{"internal-error every time", func(f *fakeSiteverify) { f.internalErrors = 100 }, 3, turnstile.ErrUnavailable, 4},
		{"server error every time", func(f *fakeSiteverify) { f.status, f.raw = 503, []byte("busy") }, 2, turnstile.ErrUnavailable, 3},
		{"retries disabled", func(f *fakeSiteverify) { f.internalErrors = 1 }, 0, turnstile.ErrUnavailable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.set(tt.script)
			v := newVerifier(t, f, secretPass, turnstile.WithRetry(tt.retries, time.Millisecond))
			_, err := v.Verify(context.Background(), "token", "")
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tt.wantErr)
			}
			calls := f.seen()
			if len(calls) != tt.wantCalls {
				t.Fatalf("siteverify calls = %d, want %d", len(calls), tt.wantCalls)
			}
			key := calls[0].form.Get("idempotency_key")
			if !uuidV4.MatchString(key) {
				t.Errorf("idempotency_key %q is not a version 4 UUID", key)
			}
			for i, c := range calls {
				if got := c.form.Get("idempotency_key"); got != key {
					t.Errorf("attempt %d sent idempotency_key %q, want the first attempt's %q", i+1, got, key)
				}
			}
		})
	}
}

func TestVerifyBackoffStopsAtDeadline(t *testing.T) {
	f := newFake(t)
	f.set(func(f *fakeSiteverify) { f.internalErrors = 100 })
	v := newVerifier(t, f, secretPass, turnstile.WithTimeout(time.Second), turnstile.WithRetry(3, time.Minute))
	start := time.Now()
	_, err := v.Verify(context.Background(), "token", "")
	if !errors.Is(err, turnstile.ErrUnavailable) {
		t.Fatalf("Verify error = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Errorf("Verify took %s: it waited for a retry that could not happen before the deadline", d)
	}
	if got := len(f.seen()); got != 1 {
		t.Errorf("siteverify calls = %d, want 1", got)
	}
}

func TestVerifyUnreachable(t *testing.T) {
	v, err := turnstile.New(secretPass, turnstile.WithEndpoint(unreachableURL(t)), turnstile.WithRetry(2, time.Millisecond), turnstile.WithHostnames("example.com"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), "token", "")
	if !errors.Is(err, turnstile.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Verify error = %v, want ErrUnavailable from the refused connection", err)
	}
}

func TestVerifyRequest(t *testing.T) {
	tests := []struct {
		name         string
		remoteIP     string
		wantRemoteIP string // "" for none sent
	}{
		{"IPv4", "192.0.2.7", "192.0.2.7"},
		{"IPv6", "2001:db8::1", "2001:db8::1"},
		{"IPv4-mapped IPv6 is unmapped", "::ffff:192.0.2.7", "192.0.2.7"},
		{"zone dropped", "fe80::1%eth0", "fe80::1"},
		{"none", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			v := newVerifier(t, f, secretPass)
			if _, err := v.Verify(context.Background(), "the-token", tt.remoteIP); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			calls := f.seen()
			if len(calls) != 1 {
				t.Fatalf("siteverify calls = %d, want 1", len(calls))
			}
			c := calls[0]
			if c.contentType != "application/x-www-form-urlencoded" {
				t.Errorf("Content-Type = %q, want application/x-www-form-urlencoded", c.contentType)
			}
			if c.form.Get("secret") != secretPass || c.form.Get("response") != "the-token" {
				t.Errorf("form = %v, want the secret and the token", c.form)
			}
			_, sent := c.form["remoteip"]
			if c.form.Get("remoteip") != tt.wantRemoteIP || sent != (tt.wantRemoteIP != "") {
				t.Errorf("remoteip = %q (sent %v), want %q", c.form.Get("remoteip"), sent, tt.wantRemoteIP)
			}
			if !uuidV4.MatchString(c.form.Get("idempotency_key")) {
				t.Errorf("idempotency_key %q is not a version 4 UUID", c.form.Get("idempotency_key"))
			}
		})
	}
}

func TestVerifyRefusesWithoutCalling(t *testing.T) {
	tests := []struct {
		name     string
		token    string
		remoteIP string
		wantErr  error
	}{
		{"empty token", "", "", turnstile.ErrMissingToken},
		{"token one byte too long", strings.Repeat("x", turnstile.MaxTokenLength+1), "", turnstile.ErrTokenTooLong},
		{"huge token", strings.Repeat("x", 1<<20), "", turnstile.ErrTokenTooLong},
		{"remote IP is a prefix", "token", "2001:db8::/64", turnstile.ErrInvalidRemoteIP},
		{"remote IP with port", "token", "192.0.2.7:443", turnstile.ErrInvalidRemoteIP},
		{"remote IP garbage", "token", "unknown", turnstile.ErrInvalidRemoteIP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			v := newVerifier(t, f, secretPass)
			if _, err := v.Verify(context.Background(), tt.token, tt.remoteIP); !errors.Is(err, tt.wantErr) {
				t.Fatalf("Verify error = %v, want %v", err, tt.wantErr)
			}
			if got := len(f.seen()); got != 0 {
				t.Errorf("siteverify calls = %d, want 0", got)
			}
		})
	}
	t.Run("token of exactly the maximum length is sent", func(t *testing.T) {
		f := newFake(t)
		v := newVerifier(t, f, secretPass)
		if _, err := v.Verify(context.Background(), strings.Repeat("x", turnstile.MaxTokenLength), ""); err != nil {
			t.Fatalf("Verify: %v", err)
		}
		if got := len(f.seen()); got != 1 {
			t.Errorf("siteverify calls = %d, want 1", got)
		}
	})
}

func TestNewInvalidOptions(t *testing.T) {
	tests := []struct {
		name   string
		secret string
		opt    turnstile.Option
	}{
		{"empty secret", "", nil},
		{"nil option", secretPass, nil},
		{"relative endpoint", secretPass, turnstile.WithEndpoint("/siteverify")},
		{"non-http endpoint", secretPass, turnstile.WithEndpoint("ftp://example.com/siteverify")},
		{"unparsable endpoint", secretPass, turnstile.WithEndpoint("http://[::1")},
		{"nil HTTP client", secretPass, turnstile.WithHTTPClient(nil)},
		{"zero timeout", secretPass, turnstile.WithTimeout(0)},
		{"negative retries", secretPass, turnstile.WithRetry(-1, time.Millisecond)},
		{"too many retries", secretPass, turnstile.WithRetry(11, time.Millisecond)},
		{"zero backoff", secretPass, turnstile.WithRetry(1, 0)},
		{"backoff over a minute", secretPass, turnstile.WithRetry(1, time.Minute+1)},
		{"no hostnames", secretPass, turnstile.WithHostnames()},
		{"empty hostname", secretPass, turnstile.WithHostnames("example.com", "")},
		{"empty action", secretPass, turnstile.WithAction("")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []turnstile.Option{tt.opt}
			if tt.secret == "" {
				opts = nil
			}
			v, err := turnstile.New(tt.secret, opts...)
			if !errors.Is(err, turnstile.ErrInvalidOption) || v != nil {
				t.Fatalf("New = %v, %v; want ErrInvalidOption", v, err)
			}
		})
	}
}
