package floodgate_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// A service behind a load balancer in a private network: X-Forwarded-For
// is believed only from the balancer, and only its right end, which the
// balancer wrote.
func ExampleKeyByIP() {
	clientIP, err := floodgate.KeyByIP(
		floodgate.TrustProxies(floodgate.PrivatePrefixes()...),
		floodgate.FromXForwardedFor(),
	)
	if err != nil {
		panic(err)
	}

	// Through the balancer, with a forged entry on the left.
	r := httptest.NewRequest(http.MethodGet, "/auth/available/user_id?userId=neo", nil)
	r.RemoteAddr = "10.0.3.7:41234"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.50")
	fmt.Println(clientIP(r))

	// Directly, bypassing the balancer: the header is not believed.
	r.RemoteAddr = "198.51.100.9:5555"
	fmt.Println(clientIP(r))

	// IPv6 clients are grouped by /64.
	r.RemoteAddr = "10.0.3.7:41234"
	r.Header.Set("X-Forwarded-For", "[2001:db8:1:2:aaaa::1]:443")
	fmt.Println(clientIP(r))
	// Output:
	// 203.0.113.50 <nil>
	// 198.51.100.9 <nil>
	// 2001:db8:1:2::/64 <nil>
}

// Behind a proxy on the same host that sets RFC 7239 Forwarded.
func ExampleFromForwarded() {
	clientIP, err := floodgate.KeyByIP(
		floodgate.TrustProxies(floodgate.LoopbackPrefixes()...),
		floodgate.FromForwarded(),
	)
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:8080"
	r.Header.Set("Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https`)
	fmt.Println(clientIP(r))

	r.Header.Set("Forwarded", "for=_hidden")
	_, err = clientIP(r)
	fmt.Println(errors.Is(err, floodgate.ErrNoClientIP))
	// Output:
	// 2001:db8:cafe::/64 <nil>
	// true
}

func ExampleNormalizePattern() {
	for _, nick := range []string{"abc1", "abc999", "ＡＢＣ７", "a b\u200bc12", "abc{NUM}", "12345", "ab1"} {
		p, ok := floodgate.NormalizePattern(nick)
		fmt.Printf("%q → %q %v\n", nick, p, ok)
	}
	// Output:
	// "abc1" → "abc{NUM}" true
	// "abc999" → "abc{NUM}" true
	// "ＡＢＣ７" → "abc{NUM}" true
	// "a b\u200bc12" → "abc{NUM}" true
	// "abc{NUM}" → "abc{{num}}" true
	// "12345" → "" false
	// "ab1" → "" false
}

// A sign-up keyed by the nickname pattern in its JSON body; the handler
// still reads the whole body.
func ExampleKeyByPattern() {
	nickname, err := floodgate.KeyByJSONField("nickname", 4<<10)
	if err != nil {
		panic(err)
	}
	byNickname, err := floodgate.KeyByPattern(nickname)
	if err != nil {
		panic(err)
	}

	r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(`{"nickname":"abc17"}`))
	fmt.Println(byNickname(r))
	body, _ := io.ReadAll(r.Body)
	fmt.Println(string(body))

	// No pattern: the error wraps ErrNoKey, so a PolicySelector falls back
	// to its next policy (the client IP, say).
	r = httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(`{"nickname":"42"}`))
	_, err = byNickname(r)
	fmt.Println(errors.Is(err, floodgate.ErrNoKey))
	// Output:
	// abc{NUM} <nil>
	// {"nickname":"abc17"}
	// true
}

// A limit per client per route: the ServeMux pattern, not the raw path, so
// /users/1 and /users/2 count together.
func ExampleJoinKeys() {
	clientIP, err := floodgate.KeyByIP()
	if err != nil {
		panic(err)
	}
	key, err := floodgate.JoinKeys(floodgate.KeyByRoutePattern(), clientIP)
	if err != nil {
		panic(err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println(key(r))
	})
	for _, path := range []string{"/users/1", "/users/2"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "192.0.2.1:1234"
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// 15:GET /users/{id}9:192.0.2.1 <nil>
	// 15:GET /users/{id}9:192.0.2.1 <nil>
}

// Exempt the office and the monitoring probe from the limit, resolving the
// client with the same trusted proxies as the key function, so that no
// one outside can claim an office address in X-Forwarded-For.
func ExampleSkipClients() {
	ipOpts := []floodgate.IPOption{
		floodgate.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), // the load balancers
		floodgate.FromXForwardedFor(),
	}
	clientKey, err := floodgate.KeyByIP(ipOpts...)
	if err != nil {
		panic(err)
	}
	exempt, err := floodgate.SkipClients([]netip.Prefix{
		netip.MustParsePrefix("198.51.100.0/24"), // the office
		netip.MustParsePrefix("192.0.2.10/32"),   // the monitoring probe
	}, ipOpts...)
	if err != nil {
		panic(err)
	}
	limiter, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 1, Period: time.Minute})
	if err != nil {
		panic(err)
	}
	mw, err := floodgate.NewMiddleware(limiter, floodgate.WithKeyFunc(clientKey), floodgate.WithSkip(exempt))
	if err != nil {
		panic(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	send := func(peer, xff string) int {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	// The office, through the balancer: never limited.
	fmt.Println(send("10.0.0.5:1234", "198.51.100.7"), send("10.0.0.5:1234", "198.51.100.7"))
	// Someone outside claiming an office address: limited by its own.
	fmt.Println(send("203.0.113.9:1234", "198.51.100.7"), send("203.0.113.9:1234", "198.51.100.7"))
	// Output:
	// 200 200
	// 200 429
}

// ClientIP gives a handler the client address the limit was keyed by.
func ExampleClientIP() {
	clientIP, err := floodgate.ClientIP(
		floodgate.TrustProxies(floodgate.LoopbackPrefixes()...),
		floodgate.FromHeader("X-Real-IP"),
	)
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:8080"
	r.Header.Set("X-Real-IP", "[2001:db8:1:2::5]:443")
	fmt.Println(clientIP(r))
	// Output:
	// 2001:db8:1:2::5 <nil>
}
