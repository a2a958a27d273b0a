package exampleapp

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Limiters builds the service's limiters. name identifies the limit
// ("probe", "probe-net", "signup-ceiling", "signup-net", "signup-nickname",
// "signup-ip", "reward-ip", "reward-net", "reward-account"),
// for a store that keeps each limit under its own key prefix; an
// in-memory constructor may ignore it. Each constructor is called once
// per limit, by New.
type Limiters struct {
	// TokenBucket builds a token bucket of rate r.
	TokenBucket func(name string, r floodgate.Rate) (floodgate.Limiter, error)
	// SlidingLog builds an exact sliding window of rate r.
	SlidingLog func(name string, r floodgate.Rate) (floodgate.Limiter, error)
}

// Config is what New needs besides the limiters; tests fill in a fake
// clock.
type Config struct {
	// TrustedProxies are the reverse proxies whose X-Forwarded-For is
	// believed. Empty: the TCP peer is the client.
	TrustedProxies []netip.Prefix
	// Logger receives denials, errors and sign-ups.
	Logger *slog.Logger
	// Clock replaces the system clock in the middleware (its log windows
	// and reset times). Nil: the real clock. The limiters take their
	// clock from the Limiters that build them.
	Clock func() time.Time
	// BotCheck, when set, wraps the sign-up handler outside its rate
	// limits, so that a request failing the bot check (a Cloudflare
	// Turnstile verification, say) is refused before it costs the
	// nickname's quota, or its IP's, anything. Nil: no bot check.
	BotCheck func(http.Handler) http.Handler
	// DecisionHook, when set, is every limit's decision hook
	// (floodgate.WithDecisionHook), e.g. the metrics of
	// contrib/prommetrics. Nil: none.
	DecisionHook func(floodgate.DecisionEvent)
}

// The limits of the example, in one place.
var (
	// probeRate: 10 username probes per 10 minutes per client IP (token
	// bucket, capacity 10, a token back every minute).
	probeRate = floodgate.Rate{Limit: 10, Period: 10 * time.Minute}
	// nicknameRate: 5 sign-ups per minute per nickname pattern
	// (abc1, abc2 … → abc{NUM}), exact sliding window.
	nicknameRate = floodgate.Rate{Limit: 5, Period: time.Minute}
	// signupIPRate: when no pattern can be formed, 20 sign-ups per minute
	// per client IP: lenient, because many honest users share an office
	// or carrier NAT address.
	signupIPRate = floodgate.Rate{Limit: 20, Period: time.Minute}
	// signupCeilingRate: 30 sign-up attempts per hour per client IP,
	// always, on top of the nickname-pattern or IP limit. A macro that
	// varies its stems (botaa0, botab1, …) forms a fresh pattern each
	// time and so never meets the pattern limit; the ceiling bounds what
	// one address can do whatever its nicknames, while an office NAT
	// still has room for 30 new accounts an hour.
	signupCeilingRate = floodgate.Rate{Limit: 30, Period: time.Hour}
	// rewardAccountRate: one reward claim per account per day (token
	// bucket of capacity 1), the limit that matters against an account
	// farm; rewardIPRate: 30 claims per hour per client IP on top, so
	// that one machine cannot claim for thousands of fresh accounts,
	// while a NAT shared by real users still has room.
	rewardAccountRate = floodgate.Rate{Limit: 1, Period: 24 * time.Hour}
	rewardIPRate      = floodgate.Rate{Limit: 30, Period: time.Hour}
	// probeNetRate, signupNetRate, rewardNetRate: ten times the per-IP
	// limits per network — an IPv6 /48, an IPv4 address — inside the
	// per-IP ones. A /48 holds 65,536 /64s, each a client of its own to
	// the per-IP limits: without these, one site's allocation could
	// probe, sign up and claim rewards 65,536 times as often as one
	// client, and fill the stores behind with made-up keys. Inside the
	// per-IP limits, so that one client cannot spend its neighbours'
	// share: it meets its own limit first.
	probeNetRate  = floodgate.Rate{Limit: 100, Period: 10 * time.Minute}
	signupNetRate = floodgate.Rate{Limit: 300, Period: time.Hour}
	rewardNetRate = floodgate.Rate{Limit: 300, Period: time.Hour}
)

// maxBodyBytes bounds the JSON bodies the key functions and handlers read.
const maxBodyBytes = 4 << 10

// probeDenied is the service's own envelope for a refused username probe.
const probeDenied = `{"resultCode":"BPLTE429","resultMessage":"요청이 너무 많습니다.","resultDetailMessage":"10분당 호출 한도를 초과했습니다. 잠시 후 다시 시도해주세요.","data":null}`

// takenUserIDs are the IDs the example treats as already registered.
var takenUserIDs = map[string]bool{"admin": true, "alice": true, "root": true}

// New returns the service's handler: the routes and their limits, on the
// limiters lims builds.
func New(cfg Config, lims Limiters) (http.Handler, error) {
	if cfg.Logger == nil {
		return nil, errors.New("exampleapp: no logger")
	}
	if lims.TokenBucket == nil || lims.SlidingLog == nil {
		return nil, errors.New("exampleapp: no limiter constructors")
	}
	mwOpts := []floodgate.MiddlewareOption{floodgate.WithLogger(cfg.Logger)}
	if cfg.Clock != nil {
		mwOpts = append(mwOpts, floodgate.WithWallClock(cfg.Clock))
	}
	if cfg.DecisionHook != nil {
		mwOpts = append(mwOpts, floodgate.WithDecisionHook(cfg.DecisionHook))
	}
	var ipOpts []floodgate.IPOption
	if len(cfg.TrustedProxies) > 0 {
		ipOpts = append(ipOpts, floodgate.TrustProxies(cfg.TrustedProxies...), floodgate.FromXForwardedFor())
	}
	clientIP, err := floodgate.KeyByIP(ipOpts...)
	if err != nil {
		return nil, err
	}
	// An IPv6 client's network is its /48; an IPv4 client's, its address
	// (carrier-grade NAT puts many users behind one, so a wider prefix
	// would block them together).
	clientNet, err := floodgate.KeyByIP(append(ipOpts, floodgate.WithIPv6Prefix(48))...)
	if err != nil {
		return nil, err
	}

	// GET /auth/available/user_id: per client IP, the service's envelope.
	probes, err := lims.TokenBucket("probe", probeRate)
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
	limitProbeNet, err := netCeiling(lims, "probe-net", probeNetRate, append(mwOpts,
		floodgate.WithPolicyName("user_id_probe_net"),
		floodgate.WithKeyFunc(clientNet),
		floodgate.WithOnly(floodgate.MatchRoute(http.MethodGet, "/auth/available/user_id")),
		floodgate.WithDeniedHandler(envelope),
	))
	if err != nil {
		return nil, err
	}

	// POST /signup: a per-IP ceiling that always applies, then by
	// nickname pattern, else by client IP.
	byCeiling, err := lims.SlidingLog("signup-ceiling", signupCeilingRate)
	if err != nil {
		return nil, err
	}
	limitSignupCeiling, err := floodgate.NewMiddleware(byCeiling, append(mwOpts,
		floodgate.WithPolicyName("signup_ip_ceiling"),
		floodgate.WithKeyFunc(clientIP),
	)...)
	if err != nil {
		return nil, err
	}
	byNickname, err := lims.SlidingLog("signup-nickname", nicknameRate)
	if err != nil {
		return nil, err
	}
	bySignupIP, err := lims.SlidingLog("signup-ip", signupIPRate)
	if err != nil {
		return nil, err
	}
	nickname, err := floodgate.KeyByJSONField("nickname", maxBodyBytes)
	if err != nil {
		return nil, err
	}
	nicknamePattern, err := floodgate.KeyByPattern(nickname)
	if err != nil {
		return nil, err
	}
	signupPolicies, err := floodgate.NewPolicySelector(
		floodgate.Policy{Name: "nickname", Limiter: byNickname, Key: nicknamePattern},
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
	limitSignupNet, err := netCeiling(lims, "signup-net", signupNetRate, append(mwOpts,
		floodgate.WithPolicyName("signup_net_ceiling"), floodgate.WithKeyFunc(clientNet)))
	if err != nil {
		return nil, err
	}
	// The order is the defence: the bot check first, so a bot costs no
	// quota; then the IP ceiling, so that every attempt from an address
	// counts whatever nickname it carries (and one it refuses costs no
	// nickname's quota); then the network's ceiling; then the pattern
	// limit or its IP fallback.
	signup := limitSignupCeiling(limitSignupNet(limitSignup(signupHandler(cfg.Logger))))
	if cfg.BotCheck != nil {
		signup = cfg.BotCheck(signup)
	}

	// POST /rewards/claim: per client IP around per account.
	byRewardIP, err := lims.SlidingLog("reward-ip", rewardIPRate)
	if err != nil {
		return nil, err
	}
	byAccount, err := lims.TokenBucket("reward-account", rewardAccountRate)
	if err != nil {
		return nil, err
	}
	limitRewardIP, err := floodgate.NewMiddleware(byRewardIP, append(mwOpts,
		floodgate.WithPolicyName("reward_ip"), floodgate.WithKeyFunc(clientIP))...)
	if err != nil {
		return nil, err
	}
	accountID, err := floodgate.KeyByJSONField("accountId", maxBodyBytes)
	if err != nil {
		return nil, err
	}
	limitRewardAccount, err := floodgate.NewMiddleware(byAccount, append(mwOpts,
		floodgate.WithPolicyName("reward_account"),
		floodgate.WithKeyFunc(accountID),
		floodgate.WithErrorHandler(badBodyOr503))...)
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/available/user_id", userIDAvailable)
	mux.Handle("POST /signup", signup)
	limitRewardNet, err := netCeiling(lims, "reward-net", rewardNetRate, append(mwOpts,
		floodgate.WithPolicyName("reward_net"), floodgate.WithKeyFunc(clientNet)))
	if err != nil {
		return nil, err
	}
	mux.Handle("POST /rewards/claim", limitRewardIP(limitRewardNet(limitRewardAccount(http.HandlerFunc(claimReward)))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	// The probe limit is outermost: a refused probe costs nothing more.
	return limitProbe(limitProbeNet(mux)), nil
}

// netCeiling returns the middleware of a per-network ceiling: an exact
// sliding window of rate r, built by lims under name.
func netCeiling(lims Limiters, name string, r floodgate.Rate, opts []floodgate.MiddlewareOption) (func(http.Handler) http.Handler, error) {
	l, err := lims.SlidingLog(name, r)
	if err != nil {
		return nil, err
	}
	return floodgate.NewMiddleware(l, opts...)
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
// key function cannot read (not JSON, too large, no such field) is the
// client's mistake, 400; anything else fails closed.
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
