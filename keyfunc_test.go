package floodgate

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// ipReq builds a request from peer with the given header lines.
func ipReq(peer string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func mustKeyByIP(t testing.TB, opts ...IPOption) KeyFunc {
	t.Helper()
	kf, err := KeyByIP(opts...)
	if err != nil {
		t.Fatalf("KeyByIP: %v", err)
	}
	return kf
}

// ipCase is one request and the key (or error) it must give.
type ipCase struct {
	name    string
	peer    string
	headers []string
	want    string // "" means an error wrapping ErrNoClientIP
}

func runIPCases(t *testing.T, kf KeyFunc, cases []ipCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kf(ipReq(tc.peer, tc.headers...))
			if tc.want == "" {
				if !errors.Is(err, ErrNoClientIP) {
					t.Fatalf("key = %q, err = %v; want an error wrapping ErrNoClientIP", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("key = %q, err = %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestKeyByIPPeerOnly(t *testing.T) {
	spoof := []string{
		"X-Forwarded-For", "203.0.113.7",
		"X-Real-IP", "203.0.113.8",
		"Forwarded", "for=203.0.113.9",
		"CF-Connecting-IP", "203.0.113.10",
	}
	runIPCases(t, mustKeyByIP(t), []ipCase{
		{"ipv4 with port", "192.0.2.1:1234", nil, "192.0.2.1"},
		{"ipv4 without port", "192.0.2.1", nil, "192.0.2.1"},
		{"headers ignored", "192.0.2.1:1234", spoof, "192.0.2.1"},
		{"ipv6 aggregated to /64", "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"bare ipv6", "2001:db8:1:2::9", nil, "2001:db8:1:2::/64"},
		{"ipv4-mapped unmapped", "[::ffff:192.0.2.1]:80", nil, "192.0.2.1"},
		{"bare ipv4-mapped", "::ffff:192.0.2.1", nil, "192.0.2.1"},
		{"zone dropped", "[fe80::1%eth0]:80", nil, "fe80::/64"},
		{"loopback v6", "[::1]:80", nil, "::/64"},
		{"empty", "", nil, ""},
		{"garbage", "garbage", nil, ""},
		{"unix socket", "@", nil, ""},
		{"port out of range", "192.0.2.1:99999", nil, ""},
		{"empty port", "192.0.2.1:", nil, ""},
		{"bracketed ipv4", "[192.0.2.1]:80", nil, ""},
		{"unclosed bracket", "[2001:db8::1:80", nil, ""},
		{"junk after bracket", "[2001:db8::1]x80", nil, ""},
		{"empty zone", "fe80::1%", nil, ""},
		{"zone on ipv4", "192.0.2.1%eth0", nil, ""},
		{"hostname", "localhost:80", nil, ""},
		{"ipv6 with unbracketed port", "2001:db8::1:99999", nil, ""},
	})
}

func TestKeyByIPPrefixes(t *testing.T) {
	tests := []struct {
		opts []IPOption
		peer string
		want string
	}{
		{nil, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1:2::/64"},
		{[]IPOption{WithIPv6Prefix(48)}, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1::/48"},
		{[]IPOption{WithIPv6Prefix(128)}, "[2001:db8:1:2:3:4:5:6]:1", "2001:db8:1:2:3:4:5:6"},
		{[]IPOption{WithIPv6Prefix(56)}, "[2001:db8:1:2ff::1]:1", "2001:db8:1:200::/56"},
		{[]IPOption{WithIPv4Prefix(24)}, "192.0.2.77:1", "192.0.2.0/24"},
		{[]IPOption{WithIPv4Prefix(24)}, "[::ffff:192.0.2.77]:1", "192.0.2.0/24"},
		{[]IPOption{WithIPv4Prefix(24), WithIPv6Prefix(48)}, "[2001:db8:1:2::1]:1", "2001:db8:1::/48"},
	}
	for _, tc := range tests {
		got, err := mustKeyByIP(t, tc.opts...)(ipReq(tc.peer))
		if err != nil || got != tc.want {
			t.Errorf("%s: key = %q, %v; want %q", tc.peer, got, err, tc.want)
		}
	}
}

// TestKeyByIPv6Aggregation: every address of one /64 is one client; the
// neighbouring /64 is another.
func TestKeyByIPv6Aggregation(t *testing.T) {
	kf := mustKeyByIP(t)
	rng := rand.New(rand.NewPCG(1, 2))
	base := netip.MustParseAddr("2001:db8:aa:bb::").As16()
	want := "2001:db8:aa:bb::/64"
	for i := 0; i < 1000; i++ {
		a := base
		for j := 8; j < 16; j++ {
			a[j] = byte(rng.Uint32())
		}
		got, err := kf(ipReq(netip.AddrPortFrom(netip.AddrFrom16(a), 443).String()))
		if err != nil || got != want {
			t.Fatalf("%v: key = %q, %v; want %q", netip.AddrFrom16(a), got, err, want)
		}
	}
	got, _ := kf(ipReq("[2001:db8:aa:bc::1]:443"))
	if got == want {
		t.Fatalf("neighbouring /64 shares the key %q", got)
	}
}

func TestKeyByIPInvalidOptions(t *testing.T) {
	trust := TrustProxies(PrivatePrefixes()...)
	tests := []struct {
		name string
		opts []IPOption
	}{
		{"nil option", []IPOption{nil}},
		{"ipv6 bits too small", []IPOption{WithIPv6Prefix(8)}},
		{"ipv6 bits too large", []IPOption{WithIPv6Prefix(129)}},
		{"ipv4 bits zero", []IPOption{WithIPv4Prefix(0)}},
		{"ipv4 bits too large", []IPOption{WithIPv4Prefix(33)}},
		{"invalid prefix", []IPOption{TrustProxies(netip.Prefix{}), FromXForwardedFor()}},
		{"xff without trusted proxies", []IPOption{FromXForwardedFor()}},
		{"header without trusted proxies", []IPOption{FromHeader("X-Real-IP")}},
		{"forwarded without trusted proxies", []IPOption{FromForwarded()}},
		{"hops without trusted proxies", []IPOption{FromXForwardedForHops(1)}},
		{"trusted proxies without source", []IPOption{trust}},
		{"empty trusted list is no trust", []IPOption{TrustProxies(), FromXForwardedFor()}},
		{"zero hops", []IPOption{trust, FromXForwardedForHops(0)}},
		{"negative hops", []IPOption{trust, FromXForwardedForHops(-1)}},
		{"too many hops", []IPOption{trust, FromXForwardedForHops(MaxForwardedEntries + 1)}},
		{"hops with xff", []IPOption{trust, FromXForwardedFor(), FromXForwardedForHops(2)}},
		{"two sources", []IPOption{trust, FromForwarded(), FromHeader("X-Real-IP")}},
		{"same source twice", []IPOption{trust, FromXForwardedFor(), FromXForwardedFor()}},
		{"empty header name", []IPOption{trust, FromHeader("")}},
		{"header name with space", []IPOption{trust, FromHeader("X Real IP")}},
		{"header name with colon", []IPOption{trust, FromHeader("X-Real-IP:")}},
		{"xff as single header", []IPOption{trust, FromHeader("x-forwarded-for")}},
		{"forwarded as single header", []IPOption{trust, FromHeader("Forwarded")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kf, err := KeyByIP(tc.opts...)
			if !errors.Is(err, ErrInvalidOption) || kf != nil {
				t.Fatalf("KeyByIP = %v, %v; want nil and an error wrapping ErrInvalidOption", kf != nil, err)
			}
		})
	}
}

func TestTrustProxiesUnmapsAndMasks(t *testing.T) {
	kf := mustKeyByIP(t, TrustProxies(netip.MustParsePrefix("::ffff:10.1.2.3/104")), FromXForwardedFor())
	// ::ffff:10.0.0.0/104 is 10.0.0.0/8: the unmapped peer 10.200.0.1 is trusted.
	got, err := kf(ipReq("10.200.0.1:1", "X-Forwarded-For", "203.0.113.7"))
	if err != nil || got != "203.0.113.7" {
		t.Fatalf("key = %q, %v; want the forwarded client", got, err)
	}
}

func TestPrefixHelpers(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "127.255.0.9", "::1"} {
		if !containsAddr(LoopbackPrefixes(), a) {
			t.Errorf("LoopbackPrefixes does not contain %s", a)
		}
	}
	for _, a := range []string{"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "fd00::1", "fc00::1"} {
		if !containsAddr(PrivatePrefixes(), a) {
			t.Errorf("PrivatePrefixes does not contain %s", a)
		}
	}
	for _, a := range []string{"172.32.0.1", "8.8.8.8", "2001:db8::1", "::1", "127.0.0.1"} {
		if containsAddr(PrivatePrefixes(), a) {
			t.Errorf("PrivatePrefixes contains %s", a)
		}
	}
	p := PrivatePrefixes()
	p[0] = netip.MustParsePrefix("0.0.0.0/0")
	if containsAddr(PrivatePrefixes(), "8.8.8.8") {
		t.Error("PrivatePrefixes returns a shared slice")
	}
}

func containsAddr(ps []netip.Prefix, s string) bool {
	a := netip.MustParseAddr(s)
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

const (
	proxy  = "10.0.0.1:5000" // a trusted peer
	direct = "198.51.100.9:5000"
)

func TestKeyByIPXForwardedFor(t *testing.T) {
	kf := mustKeyByIP(t, TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor())
	xff := "X-Forwarded-For"
	many := strings.Repeat("1.1.1.1, ", 10000) + "203.0.113.7"
	var manyLines []string
	for i := 0; i < 10000; i++ {
		manyLines = append(manyLines, xff, "1.1.1.1")
	}
	manyLines = append(manyLines, xff, "203.0.113.7")
	var emptyLines []string
	for i := 0; i < 10000; i++ {
		emptyLines = append(emptyLines, xff, "")
	}
	trustedChain := strings.TrimSuffix(strings.Repeat("10.0.0.9, ", MaxForwardedEntries+1), ", ")
	runIPCases(t, kf, []ipCase{
		{"untrusted peer ignores header", direct, []string{xff, "203.0.113.7"}, "198.51.100.9"},
		{"missing header: the proxy itself", proxy, nil, "10.0.0.1"},
		{"empty header: the proxy itself", proxy, []string{xff, " "}, "10.0.0.1"},
		{"single client", proxy, []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"forged left part", proxy, []string{xff, "1.1.1.1, 2.2.2.2, 203.0.113.7"}, "203.0.113.7"},
		{"trusted hops skipped", proxy, []string{xff, "1.1.1.1, 203.0.113.7, 10.0.0.2, 10.3.3.3"}, "203.0.113.7"},
		{"lines merged in order", proxy, []string{xff, "1.1.1.1", xff, "203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
		{"last line last", proxy, []string{xff, "203.0.113.7", xff, "10.0.0.2"}, "203.0.113.7"},
		{"all trusted: the leftmost", proxy, []string{xff, "10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"empty entries ignored", proxy, []string{xff, " , 203.0.113.7 ,, ,"}, "203.0.113.7"},
		{"tabs trimmed", proxy, []string{xff, "\t203.0.113.7\t"}, "203.0.113.7"},
		{"ipv4 with port", proxy, []string{xff, "203.0.113.7:5555"}, "203.0.113.7"},
		{"bracketed ipv6 with port", proxy, []string{xff, "[2001:db8:1:2::1]:443"}, "2001:db8:1:2::/64"},
		{"bare ipv6", proxy, []string{xff, "2001:db8:1:2::1"}, "2001:db8:1:2::/64"},
		{"ipv4-mapped", proxy, []string{xff, "::ffff:203.0.113.7"}, "203.0.113.7"},
		{"ipv4-mapped trusted hop", proxy, []string{xff, "203.0.113.7, ::ffff:10.0.0.2"}, "203.0.113.7"},
		{"zone", proxy, []string{xff, "fe80::1%eth0"}, "fe80::/64"},
		{"garbage", proxy, []string{xff, "garbage"}, ""},
		{"unknown", proxy, []string{xff, "unknown"}, ""},
		{"garbage as first untrusted", proxy, []string{xff, "203.0.113.7, garbage, 10.0.0.2"}, ""},
		{"garbage beyond the client not read", proxy, []string{xff, "garbage, 203.0.113.7"}, "203.0.113.7"},
		{"hostname", proxy, []string{xff, "example.com"}, ""},
		{"thousands of entries", proxy, []string{xff, many}, "203.0.113.7"},
		{"thousands of lines", proxy, manyLines, "203.0.113.7"},
		{"thousands of empty lines", proxy, emptyLines, ""},
		{"more trusted hops than the cap", proxy, []string{xff, trustedChain}, ""},
		{"huge entry", proxy, []string{xff, strings.Repeat("9", 1<<20)}, ""},
		{"huge garbage left of the client", proxy, []string{xff, strings.Repeat("x", 1<<20) + ", 203.0.113.7"}, "203.0.113.7"},
	})
}

func TestKeyByIPXForwardedForHops(t *testing.T) {
	trust := TrustProxies(PrivatePrefixes()...)
	xff := "X-Forwarded-For"
	one := mustKeyByIP(t, trust, FromXForwardedForHops(1))
	runIPCases(t, one, []ipCase{
		{"rightmost", proxy, []string{xff, "1.1.1.1, 203.0.113.7"}, "203.0.113.7"},
		{"rightmost even if private", proxy, []string{xff, "1.1.1.1, 10.9.9.9"}, "10.9.9.9"},
		{"empty entries do not count", proxy, []string{xff, "1.1.1.1, 203.0.113.7, ,"}, "203.0.113.7"},
		{"missing header: the proxy", proxy, nil, "10.0.0.1"},
		{"untrusted peer", direct, []string{xff, "203.0.113.7"}, "198.51.100.9"},
		{"garbage at the hop", proxy, []string{xff, "203.0.113.7, nope"}, ""},
	})
	two := mustKeyByIP(t, trust, FromXForwardedForHops(2))
	runIPCases(t, two, []ipCase{
		{"second from right", proxy, []string{xff, "1.1.1.1, 203.0.113.7, 198.51.100.1"}, "203.0.113.7"},
		{"across lines", proxy, []string{xff, "1.1.1.1, 203.0.113.7", xff, "198.51.100.1"}, "203.0.113.7"},
		{"fewer entries: the leftmost", proxy, []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"garbage right of the hop not parsed", proxy, []string{xff, "203.0.113.7, nope"}, "203.0.113.7"},
	})
}

func TestKeyByIPFromHeader(t *testing.T) {
	trust := TrustProxies(LoopbackPrefixes()...)
	kf := mustKeyByIP(t, trust, FromHeader("x-real-ip"))
	h := "X-Real-Ip"
	runIPCases(t, kf, []ipCase{
		{"from trusted peer", "127.0.0.1:1", []string{h, "203.0.113.7"}, "203.0.113.7"},
		{"ipv6 trusted peer", "[::1]:1", []string{h, "203.0.113.7"}, "203.0.113.7"},
		{"untrusted peer", direct, []string{h, "203.0.113.7"}, "198.51.100.9"},
		{"missing: the proxy", "127.0.0.1:1", nil, "127.0.0.1"},
		{"empty: the proxy", "127.0.0.1:1", []string{h, ""}, "127.0.0.1"},
		{"with port and brackets", "127.0.0.1:1", []string{h, "[2001:db8:1:2::1]:80"}, "2001:db8:1:2::/64"},
		{"spaces", "127.0.0.1:1", []string{h, " 203.0.113.7 "}, "203.0.113.7"},
		{"a list", "127.0.0.1:1", []string{h, "1.1.1.1, 203.0.113.7"}, ""},
		{"twice", "127.0.0.1:1", []string{h, "1.1.1.1", h, "203.0.113.7"}, ""},
		{"garbage", "127.0.0.1:1", []string{h, "unknown"}, ""},
	})
	cf := mustKeyByIP(t, trust, FromHeader("CF-Connecting-IP"))
	got, err := cf(ipReq("127.0.0.1:1", "Cf-Connecting-Ip", "2001:db8::5"))
	if err != nil || got != "2001:db8::/64" {
		t.Fatalf("CF-Connecting-IP: key = %q, %v", got, err)
	}
}

func TestKeyByIPFromForwarded(t *testing.T) {
	kf := mustKeyByIP(t, TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromForwarded())
	f := "Forwarded"
	runIPCases(t, kf, []ipCase{
		{"rfc example", proxy, []string{f, "for=192.0.2.60;proto=http;by=203.0.113.43"}, "192.0.2.60"},
		{"quoted ipv6 with port", proxy, []string{f, `For="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::/64"},
		{"quoted ipv4 with port", proxy, []string{f, `for="192.0.2.43:47011"`}, "192.0.2.43"},
		{"obfuscated port", proxy, []string{f, `for="192.0.2.43:_p1"`}, "192.0.2.43"},
		{"bracketed ipv6 obfuscated port", proxy, []string{f, `for="[2001:db8::1]:_x-y"`}, "2001:db8::/64"},
		{"unquoted brackets tolerated", proxy, []string{f, "for=[2001:db8::1]"}, "2001:db8::/64"},
		{"quoted pair", proxy, []string{f, `for="\[2001:db8::1\]"`}, "2001:db8::/64"},
		{"ipv4-mapped", proxy, []string{f, `for="[::ffff:192.0.2.1]"`}, "192.0.2.1"},
		{"zone", proxy, []string{f, `for="[fe80::1%25eth0]"`}, "fe80::/64"},
		{"forged left element", proxy, []string{f, "for=1.1.1.1, for=203.0.113.7"}, "203.0.113.7"},
		{"trusted hop skipped", proxy, []string{f, "for=203.0.113.7;proto=https, for=10.0.0.2;by=10.0.0.1"}, "203.0.113.7"},
		{"lines merged", proxy, []string{f, "for=203.0.113.7", f, "for=10.0.0.2"}, "203.0.113.7"},
		{"spaces around pairs", proxy, []string{f, " for = 203.0.113.7 ; proto=http "}, "203.0.113.7"},
		{"all trusted: the leftmost", proxy, []string{f, "for=10.0.0.3, for=10.0.0.2"}, "10.0.0.3"},
		{"missing: the proxy", proxy, nil, "10.0.0.1"},
		{"untrusted peer", direct, []string{f, "for=203.0.113.7"}, "198.51.100.9"},
		{"comma inside quotes", proxy, []string{f, `for=203.0.113.7;host="a,b", for=10.0.0.2`}, "203.0.113.7"},
		{"escaped quote inside quotes", proxy, []string{f, `for=1.1.1.1;x="a\", for=6.6.6.6", for=10.0.0.2`}, "1.1.1.1"},
		{"forged unterminated quote", proxy, []string{f, `for="1.1.1.1, for=203.0.113.7`}, "203.0.113.7"},
		{"unterminated quote reached", proxy, []string{f, `for="1.1.1.1, for=10.0.0.2`}, ""},
		{"unknown", proxy, []string{f, "for=unknown"}, ""},
		{"unknown with port", proxy, []string{f, `for="unknown:80"`}, ""},
		{"obfuscated", proxy, []string{f, "for=_hidden"}, ""},
		{"obfuscated quoted", proxy, []string{f, `for="_gazonk"`}, ""},
		{"obfuscated left of the client", proxy, []string{f, "for=_hidden, for=203.0.113.7"}, "203.0.113.7"},
		{"no for", proxy, []string{f, "proto=https;by=10.0.0.1"}, ""},
		{"for twice", proxy, []string{f, "for=1.1.1.1;for=203.0.113.7"}, ""},
		{"empty for", proxy, []string{f, "for="}, ""},
		{"stray quote", proxy, []string{f, `for=203.0.113.7"`}, ""},
		{"unbalanced quoted value", proxy, []string{f, `for="203.0.113.7`}, ""},
		{"hostname", proxy, []string{f, "for=example.com"}, ""},
		{"thousands of elements", proxy, []string{f, strings.Repeat("for=1.1.1.1, ", 5000) + "for=203.0.113.7"}, "203.0.113.7"},
		{"huge element", proxy, []string{f, "for=203.0.113.7;x=" + strings.Repeat("a", 1<<20)}, ""},
	})
}

// spoofValue returns a random forwarding-header value: addresses, lists,
// Forwarded syntax or raw bytes.
func spoofValue(rng *rand.Rand) string {
	randIP := func() string {
		if rng.IntN(2) == 0 {
			return netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}).String()
		}
		var a [16]byte
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		return netip.AddrFrom16(a).String()
	}
	switch rng.IntN(5) {
	case 0:
		return randIP()
	case 1:
		n := 1 + rng.IntN(50)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = randIP()
		}
		return strings.Join(parts, ", ")
	case 2:
		return fmt.Sprintf(`for="[%s]:%d";proto=https, for=%s`, randIP(), rng.IntN(70000), randIP())
	case 3:
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	default:
		const alphabet = `0123456789abcdef:.,;="[]%_ \` + "\t"
		b := make([]byte, rng.IntN(100))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
}

// TestSpoofingUntrustedPeer: whatever forwarding headers a client sends
// directly, under every configuration, its key is its own address.
func TestSpoofingUntrustedPeer(t *testing.T) {
	trust := TrustProxies(PrivatePrefixes()...)
	configs := map[string]KeyFunc{
		"peer only": mustKeyByIP(t),
		"xff":       mustKeyByIP(t, trust, FromXForwardedFor()),
		"xff hops":  mustKeyByIP(t, trust, FromXForwardedForHops(2)),
		"x-real-ip": mustKeyByIP(t, trust, FromHeader("X-Real-IP")),
		"cf":        mustKeyByIP(t, trust, FromHeader("CF-Connecting-IP")),
		"forwarded": mustKeyByIP(t, trust, FromForwarded()),
	}
	names := []string{"X-Forwarded-For", "X-Real-IP", "CF-Connecting-IP", "Forwarded"}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 10000; i++ {
		r := ipReq("203.0.113.50:4000")
		for _, n := range names {
			for k := rng.IntN(3); k > 0; k-- {
				r.Header.Add(n, spoofValue(rng))
			}
		}
		for name, kf := range configs {
			got, err := kf(r)
			if err != nil || got != "203.0.113.50" {
				t.Fatalf("%s: headers %q: key = %q, %v; want the peer", name, r.Header, got, err)
			}
		}
	}
}

// TestSpoofingBehindProxy: behind trusted proxies that append what they
// see, whatever the client put on the left, the key is the client's.
func TestSpoofingBehindProxy(t *testing.T) {
	trust := TrustProxies(netip.MustParsePrefix("10.0.0.0/8"))
	xff := mustKeyByIP(t, trust, FromXForwardedFor())
	hops := mustKeyByIP(t, trust, FromXForwardedForHops(2))
	fwd := mustKeyByIP(t, trust, FromForwarded())
	rng := rand.New(rand.NewPCG(8, 8))
	for i := 0; i < 10000; i++ {
		forged := spoofValue(rng)
		// client 203.0.113.50 → edge 10.0.0.2 → 10.0.0.1 (peer) → us.
		r := ipReq(proxy)
		r.Header.Add("X-Forwarded-For", forged)
		r.Header.Add("Forwarded", forged)
		if rng.IntN(2) == 0 { // the proxy appends to the client's line
			r.Header["X-Forwarded-For"][0] += ", 203.0.113.50, 10.0.0.2"
			r.Header["Forwarded"][0] += `, for=203.0.113.50, for="10.0.0.2:80"`
		} else { // or adds its own line
			r.Header.Add("X-Forwarded-For", "203.0.113.50, 10.0.0.2")
			r.Header.Add("Forwarded", `for=203.0.113.50, for="10.0.0.2:80"`)
		}
		for name, kf := range map[string]KeyFunc{"xff": xff, "hops": hops, "forwarded": fwd} {
			got, err := kf(r)
			if err != nil || got != "203.0.113.50" {
				t.Fatalf("%s: forged %q: key = %q, %v; want the client", name, forged, got, err)
			}
		}
	}
}

func TestKeyByHeader(t *testing.T) {
	kf := KeyByHeader("x-api-key")
	tests := []struct {
		name    string
		headers []string
		want    string
		err     error
	}{
		{"present", []string{"X-Api-Key", "k1"}, "k1", nil},
		{"trimmed", []string{"X-Api-Key", "  k1 "}, "k1", nil},
		{"first line", []string{"X-Api-Key", "k1", "X-Api-Key", "k2"}, "k1", nil},
		{"missing", nil, "", ErrNoKey},
		{"empty", []string{"X-Api-Key", " "}, "", ErrNoKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kf(ipReq(direct, tc.headers...))
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestKeyByQuery(t *testing.T) {
	kf := KeyByQuery("userId")
	tests := []struct {
		query string
		want  string
		err   error
	}{
		{"userId=alice", "alice", nil},
		{"a=1&userId=bob&userId=carol", "bob", nil},
		{"userId=a%20b+c", "a b c", nil},
		{"user%49d=dave", "dave", nil},
		{"userId=%zz&userId=eve", "eve", nil}, // malformed pairs skipped, as ParseQuery does
		{"userId=x;y&userId=frank", "frank", nil},
		{"userid=alice", "", ErrNoKey},
		{"userId=", "", ErrNoKey},
		{"userId", "", ErrNoKey},
		{"", "", ErrNoKey},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/?"+tc.query, nil)
		got, err := kf(r)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%q: key = %q, %v; want %q, %v", tc.query, got, err, tc.want, tc.err)
		}
		if tc.err == nil && got != r.URL.Query().Get("userId") {
			t.Errorf("%q: key %q differs from URL.Query().Get", tc.query, got)
		}
	}
}

func TestKeyByForm(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	kf := KeyByForm("nickname")
	tests := []struct {
		name       string
		method, ct string
		body       string
		want       string
		err        error
	}{
		{"post", "POST", form, "nickname=abc1&x=2", "abc1", nil},
		{"charset parameter", "PUT", form + "; charset=utf-8", "nickname=a%2Bb", "a+b", nil},
		{"first value", "PATCH", form, "nickname=a&nickname=b", "a", nil},
		{"missing field", "POST", form, "x=1", "", ErrNoKey},
		{"empty field", "POST", form, "nickname=", "", ErrNoKey},
		{"json body", "POST", "application/json", `{"nickname":"abc1"}`, "", ErrNoKey},
		{"get", "GET", form, "nickname=abc1", "", ErrNoKey},
		{"too large", "POST", form, "nickname=abc1&x=" + strings.Repeat("a", MaxFormBytes), "", ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/signup?nickname=query", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.ct)
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if tc.err == nil {
				if v := r.PostFormValue("nickname"); v != got {
					t.Fatalf("handler's PostFormValue = %q; key %q", v, got)
				}
				return
			}
			assertBody(t, r, tc.body)
		})
	}
}

// assertBody checks that the handler can still read the whole body.
func assertBody(t *testing.T, r *http.Request, want string) {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil || string(b) != want {
		t.Fatalf("body after the key function: %d bytes, %v; want the original %d bytes", len(b), err, len(want))
	}
}

func TestKeyByJSONField(t *testing.T) {
	kf := KeyByJSONField("nickname", 64)
	tests := []struct {
		name string
		body string
		want string
		err  error
	}{
		{"string field", `{"nickname":"abc1","age":3}`, "abc1", nil},
		{"nested values skipped", `{"a":{"nickname":"x"},"b":[1,{"c":null}],"nickname":"abc2"}`, "abc2", nil},
		{"case-insensitive like encoding/json", `{"NickName":"abc3"}`, "abc3", nil},
		{"escapes decoded", `{"nickname":"a\u0062c"}`, "abc", nil},
		{"white space around", " \n{\"nickname\" : \"abc4\"}\n ", "abc4", nil},
		{"missing", `{"name":"abc1"}`, "", ErrNoKey},
		{"null", `{"nickname":null}`, "", ErrNoKey},
		{"number", `{"nickname":123}`, "", ErrNoKey},
		{"empty string", `{"nickname":""}`, "", ErrNoKey},
		{"empty body", "", "", ErrNoKey},
		{"repeated", `{"nickname":"a1","nickname":"b1"}`, "", ErrInvalidBody},
		{"repeated in another case", `{"nickname":"x1","NICKNAME":"abc7"}`, "", ErrInvalidBody},
		{"not an object", `["nickname","abc1"]`, "", ErrInvalidBody},
		{"invalid", `{"nickname":"abc1"`, "", ErrInvalidBody},
		{"trailing data", `{"nickname":"abc1"} {}`, "", ErrInvalidBody},
		{"too large", `{"nickname":"abc1","pad":"` + strings.Repeat("x", 64) + `"}`, "", ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(tc.body))
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			assertBody(t, r, tc.body)
		})
	}
}

// closeRecorder is a body that records being closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestKeyByJSONFieldBodyHandedOn(t *testing.T) {
	body := `{"nickname":"abc1"}` + strings.Repeat(" ", 1000)
	orig := &closeRecorder{Reader: strings.NewReader(body)}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body = orig
	if _, err := KeyByJSONField("nickname", 100)(r); !errors.Is(err, ErrInvalidBody) {
		t.Fatalf("err = %v; want ErrInvalidBody for a body over the bound", err)
	}
	assertBody(t, r, body)
	if err := r.Body.Close(); err != nil || !orig.closed {
		t.Fatalf("Close = %v, original closed %v", err, orig.closed)
	}
	// No body at all.
	r = httptest.NewRequest(http.MethodPost, "/", nil)
	if _, err := KeyByJSONField("nickname", 100)(r); !errors.Is(err, ErrNoKey) {
		t.Fatalf("no body: err = %v; want ErrNoKey", err)
	}
}

// failingReader returns some bytes, then an error.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset")
	}
	p[0] = '{'
	f.n--
	return 1, nil
}

func TestKeyByJSONFieldReadError(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(&failingReader{n: 3}))
	if _, err := KeyByJSONField("nickname", 100)(r); !errors.Is(err, ErrInvalidBody) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("err = %v; want ErrInvalidBody with the cause", err)
	}
	b, err := io.ReadAll(r.Body)
	if string(b) != "{{{" || err == nil {
		t.Fatalf("handler reads %q, %v; want the bytes read and then the error", b, err)
	}
}

func TestKeyByRoutePattern(t *testing.T) {
	kf := KeyByRoutePattern()
	mux := http.NewServeMux()
	var keys []string
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, err := kf(r)
		if err != nil {
			t.Errorf("key: %v", err)
		}
		keys = append(keys, k)
	})
	for _, p := range []string{"/users/1", "/users/2", "/users/999"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	if strings.Join(keys, "|") != "GET /users/{id}|GET /users/{id}|GET /users/{id}" {
		t.Fatalf("keys = %q; want the pattern for every path", keys)
	}
	if _, err := kf(httptest.NewRequest(http.MethodGet, "/users/1", nil)); !errors.Is(err, ErrNoKey) {
		t.Fatalf("outside the mux: err = %v; want ErrNoKey", err)
	}
}

func TestKeyByMethod(t *testing.T) {
	kf := KeyByMethod()
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if k, err := kf(r); k != "POST" || err != nil {
		t.Fatalf("key = %q, %v", k, err)
	}
	r.Method = ""
	if k, err := kf(r); k != "GET" || err != nil {
		t.Fatalf("empty method: key = %q, %v; want GET", k, err)
	}
}

func constKey(k string) KeyFunc {
	return func(*http.Request) (string, error) { return k, nil }
}

func TestJoinKeys(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	join := func(parts ...string) string {
		fns := make([]KeyFunc, len(parts))
		for i, p := range parts {
			fns[i] = constKey(p)
		}
		k, err := JoinKeys(fns...)(r)
		if err != nil {
			t.Fatalf("JoinKeys(%q): %v", parts, err)
		}
		return k
	}
	if k := join("POST", "/signup", "192.0.2.1"); k != "4:POST7:/signup9:192.0.2.1" {
		t.Fatalf("key = %q", k)
	}
	// Components that would collide under a plain separator do not.
	collide := [][2][]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"a|b", "c"}, {"a", "b|c"}},
		{{"1:a", ""}, {"", "1:a"}},
		{{"", ""}, {""}},
		{{"ab"}, {"a", "b"}},
		{{"3:abc"}, {"abc"}},
	}
	for _, c := range collide {
		if x, y := join(c[0]...), join(c[1]...); x == y {
			t.Errorf("%q and %q join to the same key %q", c[0], c[1], x)
		}
	}
	// Errors are passed on, still recognizable.
	_, err := JoinKeys(KeyByMethod(), KeyByHeader("X-Missing"))(r)
	if !errors.Is(err, ErrNoKey) {
		t.Fatalf("err = %v; want ErrNoKey", err)
	}
}

func TestMisconfiguredKeyFuncsFail(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"a":"b"}`))
	for name, kf := range map[string]KeyFunc{
		"KeyByHeader empty":       KeyByHeader(""),
		"KeyByHeader invalid":     KeyByHeader("X Y"),
		"KeyByQuery empty":        KeyByQuery(""),
		"KeyByForm empty":         KeyByForm(""),
		"KeyByJSONField empty":    KeyByJSONField("", 10),
		"KeyByJSONField zero max": KeyByJSONField("a", 0),
		"JoinKeys none":           JoinKeys(),
		"JoinKeys nil":            JoinKeys(KeyByMethod(), nil),
		"KeyByPattern nil":        KeyByPattern(nil),
	} {
		if k, err := kf(r); !errors.Is(err, ErrInvalidOption) || k != "" {
			t.Errorf("%s: key = %q, %v; want an error wrapping ErrInvalidOption", name, k, err)
		}
	}
}

func BenchmarkKeyByIP(b *testing.B) {
	trust := TrustProxies(netip.MustParsePrefix("10.0.0.0/8"))
	benches := []struct {
		name string
		opts []IPOption
		peer string
		xff  string
	}{
		{"peer-v4", nil, "192.0.2.1:1234", ""},
		{"peer-v6", nil, "[2001:db8:1:2::1]:1234", ""},
		{"xff-3-hops", []IPOption{trust, FromXForwardedFor()}, proxy, "203.0.113.7, 10.0.0.3, 10.0.0.2"},
		{"xff-spoofed-1000", []IPOption{trust, FromXForwardedFor()}, proxy, strings.Repeat("1.1.1.1, ", 1000) + "203.0.113.7"},
		{"forwarded", []IPOption{trust, FromForwarded()}, proxy, ""},
	}
	// The baseline is the least any resolver does: parse RemoteAddr with
	// netip and format the address.
	peers := make([]string, 1024)
	for i := range peers {
		peers[i] = fmt.Sprintf("203.0.%d.%d:1234", i/256, i%256)
	}
	b.Run("baseline-netip", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			ap, err := netip.ParseAddrPort(peers[i%len(peers)])
			if err != nil || ap.Addr().String() == "" {
				b.Fatal(err)
			}
		}
	})
	for _, bc := range benches {
		kf := mustKeyByIP(b, bc.opts...)
		// A populated set of distinct clients, as a busy server sees.
		reqs := make([]*http.Request, 1024)
		for i := range reqs {
			peer, v := bc.peer, bc.xff
			client := fmt.Sprintf("203.0.%d.%d", i/256, i%256)
			switch {
			case bc.opts == nil && strings.HasPrefix(peer, "["):
				peer = fmt.Sprintf("[2001:db8:%x::1]:1234", i)
			case bc.opts == nil:
				peer = client + ":1234"
			default:
				v = strings.Replace(v, "203.0.113.7", client, 1)
			}
			r := ipReq(peer)
			switch {
			case bc.name == "forwarded":
				r.Header.Set("Forwarded", `for="`+client+`:4711";proto=https, for=10.0.0.2`)
			case v != "":
				r.Header.Set("X-Forwarded-For", v)
			}
			reqs[i] = r
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := kf(reqs[i%len(reqs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
