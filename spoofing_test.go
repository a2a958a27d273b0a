package floodgate_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
)

// spoofRequests is how many forged requests each configuration receives:
// the 10,000 (fullSize), else 1,000 (building the larger forged
// headers is what takes the time: 50 s for the full size on a 2-core
// machine, ten times that under the race detector).
func spoofRequests() int {
	if fullSize() {
		return 10_000
	}
	return 1_000
}

// TestSpoofedHeadersNeverBypass limits a client, then sends it thousands of
// requests carrying random forwarding headers — random addresses, forged
// chains, garbage, thousands of entries, many header lines — and counts the
// ones that get through. Under every configuration and both error policies
// the count must be zero. Run with -v to see the figures.
func TestSpoofedHeadersNeverBypass(t *testing.T) {
	proxy := netip.MustParsePrefix("10.0.0.1/32")
	type setup struct {
		name string
		opts []floodgate.IPOption
		// peer is the TCP peer; forge adds the client's forged headers and,
		// behind a proxy, what the proxy itself appends for the real client.
		peer  string
		forge func(h http.Header, r *rand.Rand)
	}
	const client = "198.51.100.9"
	setups := []setup{
		{"untrusted peer, default key", nil, client + ":40000", forgeAll},
		{"untrusted peer, XFF configured", []floodgate.IPOption{floodgate.TrustProxies(proxy), floodgate.FromXForwardedFor()}, client + ":40000", forgeAll},
		{"untrusted peer, X-Real-IP configured", []floodgate.IPOption{floodgate.TrustProxies(proxy), floodgate.FromHeader("X-Real-IP")}, client + ":40000", forgeAll},
		{"untrusted peer, Forwarded configured", []floodgate.IPOption{floodgate.TrustProxies(proxy), floodgate.FromForwarded()}, client + ":40000", forgeAll},
		{"trusted proxy, forged left part of X-Forwarded-For", []floodgate.IPOption{floodgate.TrustProxies(proxy), floodgate.FromXForwardedFor()}, "10.0.0.1:5000",
			func(h http.Header, r *rand.Rand) {
				forgeXFF(h, r)
				h.Add("X-Forwarded-For", client) // the proxy appends the peer it saw
			}},
		{"trusted proxy, forged left part of Forwarded", []floodgate.IPOption{floodgate.TrustProxies(proxy), floodgate.FromForwarded()}, "10.0.0.1:5000",
			func(h http.Header, r *rand.Rand) {
				forgeForwarded(h, r)
				h.Add("Forwarded", "for="+client)
			}},
		{"trusted proxy overwrites X-Real-IP", []floodgate.IPOption{floodgate.TrustProxies(proxy), floodgate.FromHeader("X-Real-IP")}, "10.0.0.1:5000",
			func(h http.Header, r *rand.Rand) {
				forgeXFF(h, r)
				forgeForwarded(h, r)
				h["X-Real-Ip"] = []string{client} // a proxy sets, never appends
			}},
	}
	policies := map[string][]floodgate.MiddlewareOption{
		"fail closed": nil,
		"fail open":   {floodgate.WithFailOpen()},
	}
	for _, s := range setups {
		for pname, popts := range policies {
			t.Run(s.name+", "+pname, func(t *testing.T) {
				now := time.Unix(1_700_000_000, 0)
				lim, err := floodgate.NewTokenBucket(floodgate.Rate{Limit: 3, Period: time.Hour},
					floodgate.WithClock(func() time.Time { return now }))
				if err != nil {
					t.Fatal(err)
				}
				key, err := floodgate.KeyByIP(s.opts...)
				if err != nil {
					t.Fatal(err)
				}
				mw, err := floodgate.NewMiddleware(lim, append([]floodgate.MiddlewareOption{floodgate.WithKeyFunc(key)}, popts...)...)
				if err != nil {
					t.Fatal(err)
				}
				h := mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
				serve := func(forge func(http.Header, *rand.Rand), r *rand.Rand) int {
					req := httptest.NewRequest(http.MethodGet, "/", nil)
					req.RemoteAddr = s.peer
					if forge != nil {
						forge(req.Header, r)
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					return rec.Code
				}
				// The client spends its quota with honest requests.
				honest := func(hd http.Header, _ *rand.Rand) {
					if s.peer != client+":40000" {
						hd.Add("X-Forwarded-For", client)
						hd.Add("Forwarded", "for="+client)
						hd["X-Real-Ip"] = []string{client}
					}
				}
				for i := 0; i < 3; i++ {
					if code := serve(honest, nil); code != http.StatusOK {
						t.Fatalf("honest request %d: status %d", i, code)
					}
				}
				if code := serve(honest, nil); code != http.StatusTooManyRequests {
					t.Fatalf("the client is not limited: status %d", code)
				}
				rng := rand.New(rand.NewPCG(7, uint64(len(s.name))))
				bypass, statuses := 0, map[int]int{}
				for i := 0; i < spoofRequests(); i++ {
					code := serve(s.forge, rng)
					statuses[code]++
					if code < 300 {
						bypass++
					}
				}
				if bypass != 0 {
					t.Errorf("%d of %d spoofed requests got through (statuses %v)", bypass, spoofRequests(), statuses)
				}
				if st := lim.Stats(); st.Keys != 1 {
					t.Errorf("spoofed headers created %d keys, want only the client's", st.Keys)
				}
				t.Logf("%d spoofed requests: %d bypasses, statuses %v", spoofRequests(), bypass, statuses)
			})
		}
	}
}

// forgeAll sets every forwarding header a client might try, in random
// shapes.
func forgeAll(h http.Header, r *rand.Rand) {
	forgeXFF(h, r)
	forgeForwarded(h, r)
	switch r.IntN(3) {
	case 0:
		h["X-Real-Ip"] = []string{randomAddr(r)}
	case 1:
		h["X-Real-Ip"] = []string{randomAddr(r), randomAddr(r)}
	default:
		h["X-Real-Ip"] = []string{garbage(r)}
	}
	h["Cf-Connecting-Ip"] = []string{randomAddr(r)}
}

func forgeXFF(h http.Header, r *rand.Rand) {
	switch r.IntN(5) {
	case 0: // one random address
		h.Add("X-Forwarded-For", randomAddr(r))
	case 1: // a plausible chain
		h.Add("X-Forwarded-For", randomAddr(r)+", "+randomAddr(r)+", "+randomAddr(r))
	case 2: // thousands of entries on one line
		parts := make([]string, 2000)
		for i := range parts {
			parts[i] = randomAddr(r)
		}
		h.Add("X-Forwarded-For", strings.Join(parts, ","))
	case 3: // many header lines
		for i := 0; i < 300; i++ {
			h.Add("X-Forwarded-For", randomAddr(r))
		}
	default:
		h.Add("X-Forwarded-For", garbage(r))
	}
}

func forgeForwarded(h http.Header, r *rand.Rand) {
	switch r.IntN(4) {
	case 0:
		h.Add("Forwarded", "for="+randomAddr(r))
	case 1:
		h.Add("Forwarded", fmt.Sprintf(`for="[%s]:443";proto=https, for=%s`, randomIPv6(r, 0), randomAddr(r)))
	case 2:
		h.Add("Forwarded", `for="`+randomAddr(r)) // unterminated quote
	default:
		h.Add("Forwarded", garbage(r))
	}
}

func randomAddr(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return randomIPv6(r, 0).String()
	}
	return randomIPv4(nil, int(r.Uint32())).String()
}

// garbage returns printable junk, sometimes large.
func garbage(r *rand.Rand) string {
	const alphabet = "0123456789abcdef.:[]%, ;=\"_-unknown"
	n := 1 + r.IntN(64)
	if r.IntN(20) == 0 {
		n = 8 << 10
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(b)
}

// BenchmarkKeyByIPHostileHeaders measures the cost of the worst forwarding
// headers a client can send through a trusted proxy: the work is bounded by
// MaxForwardedEntries, not by the header's size.
func BenchmarkKeyByIPHostileHeaders(b *testing.B) {
	key, err := floodgate.KeyByIP(floodgate.TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), floodgate.FromXForwardedFor())
	if err != nil {
		b.Fatal(err)
	}
	trusted := make([]string, 5000)
	for i := range trusted {
		trusted[i] = fmt.Sprintf("10.0.%d.%d", i>>8&255, i&255)
	}
	cases := map[string]http.Header{
		"5000 trusted entries on one line": {"X-Forwarded-For": {strings.Join(trusted, ",")}},
		"5000 header lines":                {"X-Forwarded-For": trusted},
		"64 KiB of garbage":                {"X-Forwarded-For": {strings.Repeat("9.", 32<<10)}},
	}
	for name, h := range cases {
		b.Run(name, func(b *testing.B) {
			req := &http.Request{RemoteAddr: "10.0.0.1:5000", Header: h}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := key(req); err == nil {
					b.Fatal("a hostile header produced a key")
				}
			}
		})
	}
}
