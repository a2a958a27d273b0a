package turnstile_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/turnstile"
)

// Attacks on the verifier's trust in siteverify's answer (issue 10 item
// 12) and on fail-open by hanging up (item 3). Each case is a way an
// attacker, or a proxy in the path, could have made a token pass.

// TestVerifyBelievesOnlyAStrictSuccess: only an HTTP 200 whose body is a
// siteverify answer decoded strictly passes. encoding/json alone matches
// field names without regard to case and lets the last duplicate win, so
// each of these passed before.
func TestVerifyBelievesOnlyAStrictSuccess(t *testing.T) {
	tests := []struct {
		name   string
		status int // 0: 200
		raw    string
		opts   []turnstile.Option
		want   error // nil: passes
	}{
		{"field name in capitals", 0, `{"SUCCESS":true}`, nil, turnstile.ErrUnavailable},
		{"field name capitalised", 0, `{"Success":true,"error-codes":[]}`, nil, turnstile.ErrUnavailable},
		{"success given twice, true last", 0, `{"success":false,"success":true}`, nil, turnstile.ErrUnavailable},
		{"success given twice, both true", 0, `{"success":true,"success":true}`, nil, turnstile.ErrUnavailable},
		{"success and a case variant", 0, `{"success":false,"SUCCESS":true}`, nil, turnstile.ErrUnavailable},
		{"hostname overridden by a case variant", 0, `{"success":true,"hostname":"evil.example","HOSTNAME":"example.com"}`,
			[]turnstile.Option{turnstile.WithHostnames("example.com")}, turnstile.ErrUnavailable},
		{"hostname given twice", 0, `{"success":true,"hostname":"evil.example","hostname":"example.com"}`,
			[]turnstile.Option{turnstile.WithHostnames("example.com")}, turnstile.ErrUnavailable},
		{"success as a string", 0, `{"success":"true"}`, nil, turnstile.ErrUnavailable},
		{"success as a number", 0, `{"success":1}`, nil, turnstile.ErrUnavailable},
		{"success null", 0, `{"success":null}`, nil, turnstile.ErrUnavailable},
		{"a second object after the answer", 0, `{"success":false,"error-codes":["invalid-input-response"]}{"success":true}`, nil, turnstile.ErrUnavailable},
		{"an array", 0, `[{"success":true}]`, nil, turnstile.ErrUnavailable},
		{"HTTP 403 claiming success", http.StatusForbidden, `{"success":true}`, nil, turnstile.ErrUnavailable},
		{"HTTP 404 claiming success", http.StatusNotFound, `{"success":true,"hostname":"example.com"}`, nil, turnstile.ErrUnavailable},
		{"HTTP 201 claiming success", http.StatusCreated, `{"success":true}`, nil, turnstile.ErrUnavailable},
		{"HTTP 203 claiming success", http.StatusNonAuthoritativeInfo, `{"success":true}`, nil, turnstile.ErrUnavailable},

		// What must keep working: siteverify's real answers, with fields it
		// may add (metadata), with whitespace, and a "no" under any status.
		{"real success", 0, `{"success":true,"challenge_ts":"2026-12-01T08:00:00.123Z","hostname":"example.com","error-codes":[],"action":"signup","cdata":""}`, nil, nil},
		{"success with metadata and spacing", 0, "{ \"success\" : true , \"hostname\":\"example.com\",\n \"metadata\": {\"ephemeral_id\": \"x:1\", \"Success\": false} }", nil, nil},
		{"a no under HTTP 400 is believed", http.StatusBadRequest, `{"success":false,"error-codes":["invalid-input-secret"]}`, nil, turnstile.ErrMisconfigured},
		{"a plain no", 0, `{"success":false,"error-codes":["invalid-input-response"]}`, nil, turnstile.ErrRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			f.set(func(f *fakeSiteverify) { f.status, f.raw = tt.status, []byte(tt.raw) })
			v := newVerifier(t, f, secretPass, tt.opts...)
			res, err := v.Verify(context.Background(), "token", "")
			if tt.want == nil {
				if err != nil || res == nil || !res.Success {
					t.Fatalf("Verify = %+v, %v; want success", res, err)
				}
				return
			}
			if !errors.Is(err, tt.want) || res != nil {
				t.Fatalf("Verify = %+v, %v; want an error wrapping %v and no Result", res, err, tt.want)
			}
			if got := len(f.seen()); got != 1 {
				t.Errorf("siteverify calls = %d, want 1: such an answer is not retried", got)
			}
		})
	}
}

// TestVerifyAnswerSizeBound: an answer of 64 KiB is read; one byte more
// is not an answer, and the rest is not read.
func TestVerifyAnswerSizeBound(t *testing.T) {
	answer := func(size int) string {
		const head, tail = `{"success":true,"hostname":"example.com","cdata":"`, `"}`
		return head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	}
	for _, tt := range []struct {
		size int
		want error
	}{{64 << 10, nil}, {64<<10 + 1, turnstile.ErrUnavailable}, {8 << 20, turnstile.ErrUnavailable}} {
		f := newFake(t)
		f.set(func(f *fakeSiteverify) { f.raw = []byte(answer(tt.size)) })
		v := newVerifier(t, f, secretPass)
		_, err := v.Verify(context.Background(), "token", "")
		if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
			t.Errorf("answer of %d bytes: Verify error %v, want %v", tt.size, err, tt.want)
		}
	}
}

// recorder is a server that records the secrets it is sent: the target
// of a malicious redirect.
type recorder struct {
	mu      sync.Mutex
	secrets []string
}

func newRecorder(t *testing.T) (*recorder, string) {
	t.Helper()
	rec := &recorder{}
	l := loopback(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		rec.mu.Lock()
		rec.secrets = append(rec.secrets, r.Form.Get("secret"))
		rec.mu.Unlock()
		writeAnswer(w, true, []string{}, map[string]string{"hostname": "example.com"})
	}))
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func (r *recorder) received() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.secrets...)
}

// TestVerifyNeverFollowsRedirect: a siteverify (or a proxy posing as it)
// that redirects never gets the secret sent on, whatever the status and
// whatever the caller's own HTTP client would do; the caller's client is
// not modified.
func TestVerifyNeverFollowsRedirect(t *testing.T) {
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		for _, client := range []string{"default", "caller's client", "caller's client that follows"} {
			t.Run(http.StatusText(status)+"/"+client, func(t *testing.T) {
				evil, evilURL := newRecorder(t)
				f := newFake(t)
				f.set(func(f *fakeSiteverify) {
					f.status, f.raw = status, []byte(`{"success":true}`)
					f.header = http.Header{"Location": {evilURL + "/collect"}}
				})
				var opts []turnstile.Option
				var own *http.Client
				var follows func(*http.Request, []*http.Request) error
				switch client {
				case "caller's client":
					own = &http.Client{Timeout: 7 * time.Second}
				case "caller's client that follows":
					follows = func(*http.Request, []*http.Request) error { return nil }
					own = &http.Client{Timeout: 7 * time.Second, CheckRedirect: follows}
				}
				if own != nil {
					opts = append(opts, turnstile.WithHTTPClient(own))
				}
				v := newVerifier(t, f, secretPass, opts...)
				res, err := v.Verify(context.Background(), "token", "")
				if !errors.Is(err, turnstile.ErrMisconfigured) || res != nil {
					t.Fatalf("Verify = %+v, %v; want ErrMisconfigured", res, err)
				}
				if !strings.Contains(err.Error(), evilURL) {
					t.Errorf("error %q does not name the redirect target", err)
				}
				if got := evil.received(); len(got) != 0 {
					t.Fatalf("the redirect target received %d requests, secrets %q", len(got), got)
				}
				if got := len(f.seen()); got != 1 {
					t.Errorf("siteverify calls = %d, want 1", got)
				}
				if own != nil {
					if own.Timeout != 7*time.Second || (own.CheckRedirect == nil) != (follows == nil) {
						t.Errorf("the caller's client was modified: %+v", own)
					}
				}
			})
		}
	}
}

// TestVerifyCallerGone: when the caller's context ends (the visitor hung
// up, or the caller's own deadline passed) Verify returns at once with
// that context's error, wrapping no sentinel, so that nobody reads it as
// an outage; and it retries nothing. The verifier's own timeout still is
// an outage (TestVerifyTimeout).
func TestVerifyCallerGone(t *testing.T) {
	notOutage := func(t *testing.T, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("Verify error = %v, want one wrapping %v", err, want)
		}
		for _, s := range []error{turnstile.ErrUnavailable, turnstile.ErrRejected, turnstile.ErrMisconfigured} {
			if errors.Is(err, s) {
				t.Fatalf("Verify error %v wraps %v: a caller giving up is not a verdict nor an outage", err, s)
			}
		}
	}

	t.Run("cancelled before", func(t *testing.T) {
		f := newFake(t)
		v := newVerifier(t, f, secretPass)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := v.Verify(ctx, "token", "")
		notOutage(t, err, context.Canceled)
		if got := len(f.seen()); got != 0 {
			t.Errorf("siteverify calls = %d, want 0", got)
		}
	})

	t.Run("cancelled while siteverify answers", func(t *testing.T) {
		f := newFake(t)
		arrived := make(chan struct{}, 16)
		f.set(func(f *fakeSiteverify) { f.block, f.arrived = true, arrived })
		v := newVerifier(t, f, secretPass)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-arrived; cancel() }()
		_, err := v.Verify(ctx, "token", "")
		notOutage(t, err, context.Canceled)
		var arrivals int
		f.set(func(f *fakeSiteverify) { arrivals = f.arrivals })
		if arrivals != 1 {
			t.Errorf("siteverify requests = %d, want 1: no retry for a caller who left", arrivals)
		}
	})

	t.Run("cancelled while waiting to retry", func(t *testing.T) {
		f := newFake(t)
		arrived := make(chan struct{}, 16)
		f.set(func(f *fakeSiteverify) { f.internalErrors, f.arrived = 100, arrived })
		v := newVerifier(t, f, secretPass, turnstile.WithRetry(3, 3*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-arrived; cancel() }()
		start := time.Now()
		_, err := v.Verify(ctx, "token", "")
		notOutage(t, err, context.Canceled)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("Verify took %s: it waited out the backoff of a caller who left", d)
		}
		var arrivals int
		f.set(func(f *fakeSiteverify) { arrivals = f.arrivals })
		if arrivals != 1 {
			t.Errorf("siteverify requests = %d, want 1", arrivals)
		}
	})

	t.Run("the caller's deadline, shorter than the verifier's", func(t *testing.T) {
		f := newFake(t)
		f.set(func(f *fakeSiteverify) { f.block = true })
		v := newVerifier(t, f, secretPass, turnstile.WithTimeout(time.Minute))
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := v.Verify(ctx, "token", "")
		notOutage(t, err, context.DeadlineExceeded)
	})
}

// TestMiddlewareClientHungUp: a visitor who hangs up while its token is
// being verified never reaches the handler, even under WithFailOpen, and
// the verification is not retried; an outage still fails open.
func TestMiddlewareClientHungUp(t *testing.T) {
	f := newFake(t)
	arrived := make(chan struct{}, 16)
	f.set(func(f *fakeSiteverify) { f.block, f.arrived = true, arrived })
	v := newVerifier(t, f, secretPass)
	var handlerErr error
	h, got := guard(t, v, turnstile.WithFailOpen(), turnstile.WithErrorHandler(
		func(w http.ResponseWriter, r *http.Request, status int, err error) {
			handlerErr = err
			turnstile.WriteProblem(w, r, status, err)
		}))
	ctx, cancel := context.WithCancel(context.Background())
	req := formRequest(url.Values{turnstile.FormField: {"tok"}}).WithContext(ctx)
	go func() { <-arrived; cancel() }()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if got.called {
		t.Fatal("the handler ran for a visitor who hung up (fail-open must not cover it)")
	}
	if rec.Code != http.StatusServiceUnavailable || !errors.Is(handlerErr, context.Canceled) || errors.Is(handlerErr, turnstile.ErrUnavailable) {
		t.Errorf("answer %d with error %v, want 503 and context.Canceled, not ErrUnavailable", rec.Code, handlerErr)
	}
	var arrivals int
	f.set(func(f *fakeSiteverify) { arrivals = f.arrivals })
	if arrivals != 1 {
		t.Errorf("siteverify requests = %d, want 1", arrivals)
	}

	// The same middleware during a real outage (siteverify answers 503)
	// still fails open for a visitor who is there.
	f.set(func(f *fakeSiteverify) { f.block, f.arrived, f.status, f.raw = false, nil, 503, []byte("down") })
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, formRequest(url.Values{turnstile.FormField: {"tok"}}))
	if !got.called || rec.Code != http.StatusOK || got.hasRes {
		t.Errorf("outage under fail-open: handler called %v, status %d, Result %v; want called, 200, no Result", got.called, rec.Code, got.hasRes)
	}
}

// TestAnotherSitesSuccessNeedsADeliberateChoice is issue 18 item 9: a
// verifier built with the secret alone accepted a success siteverify
// issued for evil.example. New now refuses to build one without a
// hostname choice, WithHostnames (which rejects that success) or
// WithAnyHostname (which accepts it, on purpose); the two together are a
// contradiction.
func TestAnotherSitesSuccessNeedsADeliberateChoice(t *testing.T) {
	f := newFake(t)
	f.set(func(f *fakeSiteverify) { f.hostname = "evil.example" })
	v, err := turnstile.New(secretPass, turnstile.WithEndpoint(f.url))
	if err == nil {
		res, verr := v.Verify(context.Background(), "token-1", "")
		t.Fatalf("built without a hostname choice; another site's token: %+v, %v", res, verr)
	}
	if !errors.Is(err, turnstile.ErrInvalidOption) || !strings.Contains(err.Error(), "WithHostnames") || !strings.Contains(err.Error(), "WithAnyHostname") {
		t.Fatalf("New: %v; want ErrInvalidOption naming WithHostnames and WithAnyHostname", err)
	}
	strict := newVerifier(t, f, secretPass, turnstile.WithHostnames("example.com"))
	if _, err := strict.Verify(context.Background(), "token-2", ""); !errors.Is(err, turnstile.ErrRejected) {
		t.Fatalf("WithHostnames(example.com), token of evil.example: %v; want ErrRejected", err)
	}
	lax := newVerifierFor(t, f, secretPass, turnstile.WithAnyHostname())
	if res, err := lax.Verify(context.Background(), "token-3", ""); err != nil || res.Hostname != "evil.example" {
		t.Fatalf("WithAnyHostname: %+v, %v; want the success, deliberately", res, err)
	}
	if _, err := turnstile.New(secretPass, turnstile.WithHostnames("example.com"), turnstile.WithAnyHostname()); !errors.Is(err, turnstile.ErrInvalidOption) {
		t.Fatalf("WithHostnames and WithAnyHostname together: %v; want ErrInvalidOption", err)
	}
}
