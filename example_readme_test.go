package floodgate_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The declarations above each Example in this file are quoted verbatim by
// the README's "Three ways to use it" (TestREADMESnippets keeps the two
// in step), so they are written as a service would write them: no test
// clock, no test plumbing.

// limitProbe wraps a service's handler: the username-availability probe
// gets 10 requests per 10 minutes per client IP, and 100 per network (an
// IPv6 /48 holds 65,536 client /64s), answered in the service's own error
// envelope; every other route passes untouched.
func limitProbe(mux http.Handler, logger *slog.Logger) (http.Handler, error) {
	ipOpts := []floodgate.IPOption{
		floodgate.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), // your load balancers
		floodgate.FromXForwardedFor(),
	}
	clientIP, err := floodgate.KeyByIP(ipOpts...)
	if err != nil {
		return nil, err
	}
	clientNet, err := floodgate.KeyByIP(append(ipOpts, floodgate.WithIPv6Prefix(48))...)
	if err != nil {
		return nil, err
	}
	envelope, err := floodgate.StaticJSON([]byte(`{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}`))
	if err != nil {
		return nil, err
	}
	limit := func(r floodgate.Rate, opts ...floodgate.MiddlewareOption) (func(http.Handler) http.Handler, error) {
		l, err := floodgate.NewTokenBucket(r)
		if err != nil {
			return nil, err
		}
		return floodgate.NewMiddleware(l, append(opts,
			floodgate.WithOnly(floodgate.MatchRoute(http.MethodGet, "/auth/available/user_id")),
			floodgate.WithDeniedHandler(envelope),
			floodgate.WithLogger(logger), // denials at WARN, one line per client per period
		)...)
	}
	byIP, err := limit(floodgate.Rate{Limit: 10, Period: 10 * time.Minute}, floodgate.WithKeyFunc(clientIP))
	if err != nil {
		return nil, err
	}
	byNet, err := limit(floodgate.Rate{Limit: 100, Period: 10 * time.Minute},
		floodgate.WithPolicyName("network"), floodgate.WithKeyFunc(clientNet))
	if err != nil {
		return nil, err
	}
	// Outermost, before authentication (inside a CORS handler, if any): a
	// refused probe costs nothing. The client's own limit comes first, so
	// that it cannot spend its network's.
	return byIP(byNet(mux)), nil
}

// Wrap a handler: the eleventh probe from one client (behind the load
// balancer 10.0.0.5) within 10 minutes is refused; other routes are not
// limited.
func Example_wrapAHandler() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/available/user_id", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"resultCode":"BPLTE200","data":true}`)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {})
	handler, err := limitProbe(mux, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		panic(err)
	}

	get := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "10.0.0.5:41000"
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w
	}
	for i := range 10 {
		get("/auth/available/user_id?userId=u" + strconv.Itoa(i))
	}
	w := get("/auth/available/user_id?userId=bob")
	fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"))
	fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Body.String())
	fmt.Println("health check:", get("/healthz").Code)
	// Output:
	// 429 Retry-After: 60
	// RateLimit-Policy: "default";q=10;w=600
	// {"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}
	// health check: 200
}

// ErrTooManySignups is returned by SignupService.Register when the
// nickname's pattern has been used too often.
var ErrTooManySignups = errors.New("too many sign-ups")

// SignupService registers accounts. A macro creating abc1, abc2, …
// abc999 hits one limit: the nickname pattern abc{NUM}, 5 per minute.
type SignupService struct {
	byPattern *floodgate.SlidingLog
	create    func(ctx context.Context, nickname string) error // the service's own work
}

// NewSignupService returns a SignupService that creates accounts with create.
func NewSignupService(create func(ctx context.Context, nickname string) error) (*SignupService, error) {
	byPattern, err := floodgate.NewSlidingLog(floodgate.Rate{Limit: 5, Period: time.Minute})
	if err != nil {
		return nil, err
	}
	return &SignupService{byPattern: byPattern, create: create}, nil
}

// Register creates the account unless its nickname pattern is over the limit.
func (s *SignupService) Register(ctx context.Context, nickname string) error {
	if pattern, ok := floodgate.NormalizePattern(nickname); ok { // "abc17" → "abc{NUM}"
		d, err := s.byPattern.Allow(ctx, pattern)
		if err != nil {
			return err
		}
		if !d.Allowed {
			seconds := floodgate.RetryAfterSeconds(d.RetryAfter) // rounded up, at least 1
			return fmt.Errorf("%w like %q: retry in %ds", ErrTooManySignups, nickname, seconds)
		}
	}
	return s.create(ctx, nickname)
}

// Call a limiter from business code: the sixth nickname of one pattern
// within a minute is refused, another pattern is not.
func Example_businessCode() {
	signups, err := NewSignupService(func(ctx context.Context, nickname string) error {
		fmt.Println("created", nickname)
		return nil
	})
	if err != nil {
		panic(err)
	}
	for _, nickname := range []string{"abc1", "abc2", "abc3", "abc4", "abc999", "abc6", "xyz1"} {
		if err := signups.Register(context.Background(), nickname); err != nil {
			fmt.Println(err, errors.Is(err, ErrTooManySignups))
		}
	}
	// Output:
	// created abc1
	// created abc2
	// created abc3
	// created abc4
	// created abc999
	// too many sign-ups like "abc6": retry in 60s true
	// created xyz1
}

// signupPolicies limits sign-ups by their most meaningful signal: the
// nickname pattern, 5 per minute, or, when the nickname forms no pattern,
// the client IP, 20 per minute (lenient, for users behind one NAT).
func signupPolicies() (*floodgate.PolicySelector, error) {
	byNickname, err := floodgate.NewSlidingLog(floodgate.PerMinute(5))
	if err != nil {
		return nil, err
	}
	byIP, err := floodgate.NewSlidingLog(floodgate.PerMinute(20))
	if err != nil {
		return nil, err
	}
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		return nil, err
	}
	nickname, err := floodgate.KeyByJSONField("nickname", 4<<10)
	if err != nil {
		return nil, err
	}
	nicknamePattern, err := floodgate.KeyByPattern(nickname)
	if err != nil {
		return nil, err
	}
	return floodgate.NewPolicySelector(
		floodgate.Policy{Name: "nickname", Limiter: byNickname, Key: nicknamePattern},
		floodgate.Policy{Name: "ip", Limiter: byIP, Key: clientIP},
	)
}

// signupRoutes limits POST /signup in middleware, before createAccount runs.
func signupRoutes(createAccount http.Handler) (*http.ServeMux, error) {
	policies, err := signupPolicies()
	if err != nil {
		return nil, err
	}
	limit, err := floodgate.NewPolicyMiddleware(policies)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /signup", limit(createAccount))
	return mux, nil
}

// signupHandler checks the same policies from business code, where the
// handler decides what a refusal looks like.
func signupHandler(policies *floodgate.PolicySelector) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		policy, d, err := policies.AllowN(r, 1) // the body stays readable
		switch {
		case err != nil:
			// 4xx for the client's own errors (a bad body, no usable
			// address), 503 when the limiter failed: as the middleware does.
			status := floodgate.ErrorStatus(err)
			http.Error(w, http.StatusText(status), status)
		case !d.Allowed:
			w.Header().Set("Retry-After", strconv.FormatInt(floodgate.RetryAfterSeconds(d.RetryAfter), 10))
			http.Error(w, "too many sign-ups by "+policy, http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusCreated) // create the account here
		}
	}
}

// A policy selector, in middleware and in business code: nicknames of one
// pattern share a limit, a nickname without a pattern ("jo") falls back to
// the client IP, and a body that is not JSON is refused as the client's
// error.
func Example_policySelector() {
	created := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	viaMiddleware, err := signupRoutes(created)
	if err != nil {
		panic(err)
	}
	policies, err := signupPolicies()
	if err != nil {
		panic(err)
	}
	inBusinessCode := signupHandler(policies)

	for _, h := range []http.Handler{viaMiddleware, inBusinessCode} {
		var codes []string
		for _, nickname := range []string{"abc1", "abc2", "abc3", "abc4", "abc5", "abc6", "xyz1", "jo", "broken"} {
			body := `{"nickname":"` + nickname + `"}`
			if nickname == "broken" {
				body = `{"nickname":` // not JSON: the client's error, never a pass
			}
			r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(body))
			r.RemoteAddr = "198.51.100.4:40000"
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes = append(codes, nickname+"="+strconv.Itoa(w.Code))
		}
		fmt.Println(strings.Join(codes, " "))
	}
	// Output:
	// abc1=201 abc2=201 abc3=201 abc4=201 abc5=201 abc6=429 xyz1=201 jo=201 broken=400
	// abc1=201 abc2=201 abc3=201 abc4=201 abc5=201 abc6=429 xyz1=201 jo=201 broken=400
}
