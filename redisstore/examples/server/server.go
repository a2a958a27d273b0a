package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/redisstore"
)

// config is what newServer needs; tests fill in a fake clock.
type config struct {
	// Redis runs the limiters' scripts.
	Redis redisstore.Scripter
	// Prefix starts every Redis key of this service; each limit adds its
	// own name to it.
	Prefix string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed. Empty: the TCP peer is the client.
	TrustedProxies []netip.Prefix
	// Logger receives denials, errors and sign-ups.
	Logger *slog.Logger
	// Clock replaces the server's TIME in the Redis limiters, the system
	// clock in their in-memory fallbacks and in the middleware. Nil: real
	// clocks.
	Clock func() time.Time
}

// The limits, as in the in-memory example server (examples/server in the
// floodgate module).
var (
	probeRate         = floodgate.Rate{Limit: 10, Period: 10 * time.Minute}
	nicknameRate      = floodgate.Rate{Limit: 5, Period: time.Minute}
	signupIPRate      = floodgate.Rate{Limit: 20, Period: time.Minute}
	rewardAccountRate = floodgate.Rate{Limit: 1, Period: 24 * time.Hour}
	rewardIPRate      = floodgate.Rate{Limit: 30, Period: time.Hour}
)

// denyCacheKeys bounds each limiter's local deny cache.
const denyCacheKeys = 10000

// maxBodyBytes bounds the JSON bodies the key functions and handlers read.
const maxBodyBytes = 4 << 10

// probeDenied is the service's own envelope for a refused username probe.
const probeDenied = `{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}`

// takenUserIDs are the IDs the example treats as already registered.
var takenUserIDs = map[string]bool{"admin": true, "alice": true, "root": true}

// limiters builds the Redis limiters of one service instance. Each has an
// in-memory fallback of the same rate, which answers while Redis is down:
// per instance, so during an outage a client may get the quota once per
// instance. Each has a deny cache, so a flooding client costs Redis one
// call per RetryAfter.
type limiters struct {
	cfg config
}

func (l limiters) opts(name string, mem floodgate.Limiter) []redisstore.Option {
	o := []redisstore.Option{
		redisstore.WithPrefix(l.cfg.Prefix + ":" + name),
		redisstore.WithFallback(mem),
		redisstore.WithDenyCache(denyCacheKeys),
	}
	if l.cfg.Clock != nil {
		o = append(o, redisstore.WithClock(l.cfg.Clock))
	}
	return o
}

func (l limiters) memOpts() []floodgate.Option {
	if l.cfg.Clock != nil {
		return []floodgate.Option{floodgate.WithClock(l.cfg.Clock)}
	}
	return nil
}

func (l limiters) tokenBucket(name string, r floodgate.Rate) (floodgate.Limiter, error) {
	mem, err := floodgate.NewTokenBucket(r, l.memOpts()...)
	if err != nil {
		return nil, err
	}
	return redisstore.NewTokenBucket(l.cfg.Redis, r, l.opts(name, mem)...)
}

func (l limiters) slidingLog(name string, r floodgate.Rate) (floodgate.Limiter, error) {
	mem, err := floodgate.NewSlidingLog(r, l.memOpts()...)
	if err != nil {
		return nil, err
	}
	return redisstore.NewSlidingLog(l.cfg.Redis, r, l.opts(name, mem)...)
}

// newServer returns the example's handler: the routes and their limits,
// on Redis.
func newServer(cfg config) (http.Handler, error) {
	if cfg.Logger == nil || cfg.Redis == nil {
		return nil, errors.New("server: no logger or no Redis")
	}
	lims := limiters{cfg}
	mwOpts := []floodgate.MiddlewareOption{floodgate.WithLogger(cfg.Logger)}
	if cfg.Clock != nil {
		mwOpts = append(mwOpts, floodgate.WithWallClock(cfg.Clock))
	}
	var ipOpts []floodgate.IPOption
	if len(cfg.TrustedProxies) > 0 {
		ipOpts = append(ipOpts, floodgate.TrustProxies(cfg.TrustedProxies...), floodgate.FromXForwardedFor())
	}
	clientIP, err := floodgate.KeyByIP(ipOpts...)
	if err != nil {
		return nil, err
	}

	// GET /auth/available/user_id: per client IP, the service's envelope.
	probes, err := lims.tokenBucket("probe", probeRate)
	if err != nil {
		return nil, err
	}
	envelope, err := floodgate.StaticJSON([]byte(probeDenied))
	if err != nil {
		return nil, err
	}
	limitProbe, err := floodgate.NewMiddleware(probes, append(mwOpts,
		floodgate.WithPolicyName("user_id_probe"),
		floodgate.WithKeyFunc(clientIP),
		floodgate.WithOnly(floodgate.MatchRoute(http.MethodGet, "/auth/available/user_id")),
		floodgate.WithDeniedHandler(envelope),
	)...)
	if err != nil {
		return nil, err
	}

	// POST /signup: by nickname pattern, else by client IP.
	byNickname, err := lims.slidingLog("signup-nickname", nicknameRate)
	if err != nil {
		return nil, err
	}
	bySignupIP, err := lims.slidingLog("signup-ip", signupIPRate)
	if err != nil {
		return nil, err
	}
	signupPolicies, err := floodgate.NewPolicySelector(
		floodgate.Policy{Name: "nickname", Limiter: byNickname,
			Key: floodgate.KeyByPattern(floodgate.KeyByJSONField("nickname", maxBodyBytes))},
		floodgate.Policy{Name: "signup_ip", Limiter: bySignupIP, Key: clientIP},
	)
	if err != nil {
		return nil, err
	}
	limitSignup, err := floodgate.NewPolicyMiddleware(signupPolicies,
		append(mwOpts, floodgate.WithErrorHandler(badBodyOr503))...)
	if err != nil {
		return nil, err
	}

	// POST /rewards/claim: per client IP around per account.
	byRewardIP, err := lims.slidingLog("reward-ip", rewardIPRate)
	if err != nil {
		return nil, err
	}
	byAccount, err := lims.tokenBucket("reward-account", rewardAccountRate)
	if err != nil {
		return nil, err
	}
	limitRewardIP, err := floodgate.NewMiddleware(byRewardIP, append(mwOpts,
		floodgate.WithPolicyName("reward_ip"), floodgate.WithKeyFunc(clientIP))...)
	if err != nil {
		return nil, err
	}
	limitRewardAccount, err := floodgate.NewMiddleware(byAccount, append(mwOpts,
		floodgate.WithPolicyName("reward_account"),
		floodgate.WithKeyFunc(floodgate.KeyByJSONField("accountId", maxBodyBytes)),
		floodgate.WithErrorHandler(badBodyOr503))...)
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/available/user_id", userIDAvailable)
	mux.Handle("POST /signup", limitSignup(signupHandler(cfg.Logger)))
	mux.Handle("POST /rewards/claim", limitRewardIP(limitRewardAccount(http.HandlerFunc(claimReward))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// The probe limit is outermost: a refused probe costs nothing more.
	return limitProbe(mux), nil
}

// envelope is the service's response shape on the username probe.
type envelope struct {
	ResultCode          string `json:"resultCode"`
	ResultMessage       string `json:"resultMessage"`
	ResultDetailMessage string `json:"resultDetailMessage"`
	Data                any    `json:"data"`
}

func userIDAvailable(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("userId")
	if id == "" {
		writeJSON(w, http.StatusBadRequest, envelope{"BPLTE400", "잘못된 요청입니다.", "userId가 필요합니다.", nil})
		return
	}
	if takenUserIDs[id] {
		writeJSON(w, http.StatusOK, envelope{"BPLTE200", "성공", "이미 사용 중인 아이디입니다.", false})
		return
	}
	writeJSON(w, http.StatusOK, envelope{"BPLTE200", "성공", "사용할 수 있는 아이디입니다.", true})
}

func signupHandler(log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Nickname string `json:"nickname"`
		}
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil || req.Nickname == "" {
			writeProblem(w, http.StatusBadRequest, "Bad Request", `The body must be a JSON object with a non-empty "nickname".`)
			return
		}
		log.InfoContext(r.Context(), "signed up", slog.String("nickname", req.Nickname))
		writeJSON(w, http.StatusCreated, map[string]string{"nickname": req.Nickname, "status": "created"})
	}
}

func claimReward(w http.ResponseWriter, r *http.Request) {
	var req struct {
		AccountID string `json:"accountId"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil || req.AccountID == "" {
		writeProblem(w, http.StatusBadRequest, "Bad Request", `The body must be a JSON object with a non-empty "accountId".`)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"accountId": req.AccountID, "reward": "welcome-bonus"})
}

// badBodyOr503 is the error policy of the body-keyed limits: a body the
// key function cannot read is the client's mistake, 400; anything else
// fails closed.
func badBodyOr503(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, floodgate.ErrInvalidBody) || errors.Is(err, floodgate.ErrNoKey) {
		writeProblem(w, http.StatusBadRequest, "Bad Request", "The request body is not the JSON this endpoint expects.")
		return
	}
	floodgate.FailClosed(w, r, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": title, "status": status, "detail": detail,
	})
}

// parsePrefixes parses the -trusted-proxy flag: comma-separated CIDRs or
// single addresses.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range splitComma(s) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("trusted proxy %q: not a CIDR or an address", f)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func splitComma(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
