package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/interleave"
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
		// Trusting every address lets any client choose its key.
		{"trust all ipv4", []IPOption{TrustProxies(netip.MustParsePrefix("0.0.0.0/0")), FromXForwardedFor()}},
		{"trust all ipv6", []IPOption{TrustProxies(netip.MustParsePrefix("::/0")), FromXForwardedFor()}},
		{"trust all ipv4, mapped", []IPOption{TrustProxies(netip.MustParsePrefix("::ffff:0:0/96")), FromXForwardedFor()}},
		{"trust all among others", []IPOption{TrustProxies(LoopbackPrefixes()...), TrustProxies(netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("0.0.0.0/0")), FromHeader("X-Real-IP")}},
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

// prefixes parses a list of prefixes.
func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// slash8s returns the IPv4 /8s from first to last.
func slash8s(first, last int) []netip.Prefix {
	var ps []netip.Prefix
	for i := first; i <= last; i++ {
		ps = append(ps, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(i)}), 8))
	}
	return ps
}

// piecesOfEveryone are trusted-proxy lists that, together, hold every
// address a client can connect from, though no prefix alone is /0 (issue
// 18 item 6).
var piecesOfEveryone = []struct {
	name string
	list []netip.Prefix
}{
	{"IPv4 halves", prefixes("0.0.0.0/1", "128.0.0.0/1")},
	{"IPv6 halves", prefixes("::/1", "8000::/1")},
	{"IPv4-mapped /97s", prefixes("::ffff:0:0/97", "::ffff:128.0.0.0/97")},
	{"a mapped half and a plain half", prefixes("::ffff:0:0/97", "128.0.0.0/1")},
	{"256 /8s", slash8s(0, 255)},
	{"the 223 unicast /8s", slash8s(1, 223)},
	{"the unicast /8s but the private one", append(slash8s(1, 9), slash8s(11, 223)...)},
	{"global IPv6 unicast", prefixes("2000::/3")},
	{"global IPv6 in quarters", prefixes("2000::/5", "2800::/5", "3000::/5", "3800::/5")},
	{"the IPv4-mapped block as IPv6", prefixes("::/8")},
	{"overlapping, out of order", prefixes("128.0.0.0/2", "0.0.0.0/1", "192.0.0.0/2", "64.0.0.0/3")},
	{"everything but one private /24", allBut(netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("10.1.2.0/24"))},
	{"every IPv6 address but loopback", allBut(netip.MustParsePrefix("::/0"), netip.MustParsePrefix("::1/128"))},
}

// TestTrustEveryoneInPieces: a trusted list whose prefixes together cover
// every public IPv4 address, every global IPv6 address or the
// IPv4-mapped block is refused at construction, as /0 is, also when given
// over several TrustProxies options; so is such an exemption list. Before
// the fix each was accepted and any client picked its key with one
// X-Forwarded-For line.
func TestTrustEveryoneInPieces(t *testing.T) {
	for _, tc := range piecesOfEveryone {
		t.Run(tc.name, func(t *testing.T) {
			kf, err := KeyByIP(TrustProxies(tc.list...), FromXForwardedFor())
			if !errors.Is(err, ErrInvalidOption) || kf != nil || !strings.Contains(err.Error(), "name the proxies") {
				if kf != nil {
					k, _ := kf(ipReq("198.51.100.9:1", "X-Forwarded-For", "any-key-i-like"))
					k2, _ := kf(ipReq("198.51.100.9:1", "X-Forwarded-For", "203.0.113.99"))
					t.Errorf("accepted: a client picks its key (%q, %q)", k, k2)
				}
				t.Fatalf("KeyByIP: %v; want ErrInvalidOption naming the fix", err)
			}
			half := len(tc.list) / 2
			if _, err := KeyByIP(TrustProxies(tc.list[:half]...), TrustProxies(tc.list[half:]...), FromHeader("X-Real-IP")); !errors.Is(err, ErrInvalidOption) {
				t.Errorf("split over two TrustProxies: %v; want ErrInvalidOption", err)
			}
			if _, err := ClientIP(TrustProxies(tc.list...), FromForwarded()); !errors.Is(err, ErrInvalidOption) {
				t.Errorf("ClientIP: %v; want ErrInvalidOption", err)
			}
			if _, err := SkipClients(tc.list); !errors.Is(err, ErrInvalidOption) {
				t.Errorf("SkipClients: %v; want ErrInvalidOption", err)
			}
		})
	}
}

// allBut returns prefixes that together hold every address of within
// but those of hole: the sibling of each prefix on the way from hole up
// to within.
func allBut(within, hole netip.Prefix) []netip.Prefix {
	var ps []netip.Prefix
	for p := hole.Masked(); p.Bits() > within.Bits(); {
		b := p.Addr().AsSlice()
		i := p.Bits() - 1
		b[i/8] ^= 0x80 >> (i % 8)
		sibling, _ := netip.AddrFromSlice(b)
		ps = append(ps, netip.PrefixFrom(sibling, p.Bits()))
		p = netip.PrefixFrom(p.Addr(), p.Bits()-1).Masked()
	}
	return ps
}

// TestTrustLargeButPartialLists: broad lists that leave some clients out
// are accepted: the rule is "every client", not "too many" (a list that
// leaves one public /24 out is accepted; so is 0.0.0.0/1 alone).
func TestTrustLargeButPartialLists(t *testing.T) {
	for name, list := range map[string][]netip.Prefix{
		"private and loopback":            append(PrivatePrefixes(), LoopbackPrefixes()...),
		"a CDN's ranges":                  prefixes("173.245.48.0/20", "103.21.244.0/22", "104.16.0.0/13", "172.64.0.0/13", "2400:cb00::/32", "2606:4700::/32"),
		"one IPv4 half":                   prefixes("0.0.0.0/1"),
		"all but one public /24":          allBut(netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("198.51.99.0/24")),
		"all but one global IPv6 /48":     allBut(netip.MustParsePrefix("2000::/3"), netip.MustParsePrefix("2a00:1450:4001::/48")),
		"global IPv6 but one /4":          prefixes("2000::/4"),
		"non-global IPv6 above 2000::/3":  prefixes("4000::/2", "8000::/1"),
		"the mapped block less one /97":   prefixes("::ffff:0:0/97"),
		"IPv4 as NAT64, not IPv4-mapped":  prefixes("64:ff9b::/96"),
		"everything IPv4 is not reserved": prefixes("224.0.0.0/3"),
	} {
		if _, err := KeyByIP(TrustProxies(list...), FromXForwardedFor()); err != nil {
			t.Errorf("%s: %v; want accepted", name, err)
		}
	}
}

// TestUnixSocketPeerRefusedByDefault: a unix-socket peer has no address;
// without TrustUnixSocket it is an error that names the option, never a
// shared key.
func TestUnixSocketPeerRefusedByDefault(t *testing.T) {
	configs := map[string]KeyFunc{
		"peer": mustKeyByIP(t),
		"xff":  mustKeyByIP(t, TrustProxies(LoopbackPrefixes()...), FromXForwardedFor()),
	}
	for name, kf := range configs {
		for _, peer := range []string{"@", ""} {
			k, err := kf(ipReq(peer, "X-Forwarded-For", "203.0.113.7"))
			if !errors.Is(err, ErrNoClientIP) || !strings.Contains(err.Error(), "TrustUnixSocket") {
				t.Errorf("%s, RemoteAddr %q: key = %q, %v; want ErrNoClientIP naming TrustUnixSocket", name, peer, k, err)
			}
		}
	}
}

// TestTrustUnixSocket: under TrustUnixSocket a unix-socket peer is a
// trusted proxy whose forwarding header is read; with no header it is an
// error (the peer has no address of its own to share).
func TestTrustUnixSocket(t *testing.T) {
	xff, real, fwd := "X-Forwarded-For", "X-Real-Ip", "Forwarded"
	unixOnly := mustKeyByIP(t, TrustUnixSocket(), FromXForwardedFor())
	runIPCases(t, unixOnly, []ipCase{
		{"@ with xff", "@", []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"empty with xff", "", []string{xff, "203.0.113.7"}, "203.0.113.7"},
		{"forged left part", "@", []string{xff, "1.1.1.1, 203.0.113.7"}, "203.0.113.7"},
		{"no header", "@", nil, ""},
		{"empty header", "@", []string{xff, " , "}, ""},
		{"garbage", "@", []string{xff, "unknown"}, ""},
		{"tcp peers still untrusted", direct, []string{xff, "203.0.113.7"}, "198.51.100.9"},
		{"loopback tcp peer not trusted", "127.0.0.1:80", []string{xff, "203.0.113.7"}, "127.0.0.1"},
	})
	withProxies := mustKeyByIP(t, TrustUnixSocket(), TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor())
	runIPCases(t, withProxies, []ipCase{
		{"trusted hops skipped", "@", []string{xff, "203.0.113.7, 10.0.0.2"}, "203.0.113.7"},
		{"all trusted: the leftmost", "@", []string{xff, "10.0.0.3, 10.0.0.2"}, "10.0.0.3"},
		{"tcp proxy too", proxy, []string{xff, "203.0.113.7"}, "203.0.113.7"},
	})
	runIPCases(t, mustKeyByIP(t, TrustUnixSocket(), FromHeader("X-Real-IP")), []ipCase{
		{"single header", "@", []string{real, "203.0.113.7"}, "203.0.113.7"},
		{"missing", "@", nil, ""},
	})
	runIPCases(t, mustKeyByIP(t, TrustUnixSocket(), FromForwarded()), []ipCase{
		{"forwarded", "", []string{fwd, "for=203.0.113.7;proto=https"}, "203.0.113.7"},
		{"missing", "", nil, ""},
	})
	runIPCases(t, mustKeyByIP(t, TrustUnixSocket(), FromXForwardedForHops(1)), []ipCase{
		{"rightmost", "@", []string{xff, "1.1.1.1, 203.0.113.7"}, "203.0.113.7"},
		{"missing", "@", nil, ""},
	})
	if kf, err := KeyByIP(TrustUnixSocket()); !errors.Is(err, ErrInvalidOption) || kf != nil {
		t.Fatalf("TrustUnixSocket without a source: %v; want ErrInvalidOption", err)
	}
}

// TestTrustUnixSocketServer: behind a real unix-socket listener, the
// request's RemoteAddr is what the option recognizes.
func TestTrustUnixSocketServer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Skipf("no unix sockets here: %v", err)
	}
	kf := mustKeyByIP(t, TrustUnixSocket(), FromXForwardedFor())
	type result struct {
		remote, key string
		err         error
	}
	got := make(chan result, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := kf(r)
		got <- result{r.RemoteAddr, k, err}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		},
	}}
	req, _ := http.NewRequest(http.MethodGet, "http://unix/", nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	res := <-got
	if res.err != nil || res.key != "203.0.113.7" {
		t.Fatalf("RemoteAddr %q: key = %q, %v; want the forwarded client", res.remote, res.key, res.err)
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

func BenchmarkKeyByIP(b *testing.B) {
	trust := TrustProxies(netip.MustParsePrefix("10.0.0.0/8"))
	benches := []struct {
		name string
		opts []IPOption
		peer string
		xff  string
	}{
		{"peer-v4", nil, "192.0.2.1:1234", ""},
		{"peer-v4-mapped", nil, "[::ffff:192.0.2.1]:1234", ""},
		{"peer-v6", nil, "[2001:db8:1:2::1]:1234", ""},
		{"xff-1-hop", []IPOption{trust, FromXForwardedFor()}, proxy, "203.0.113.7"},
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
			case bc.opts == nil && strings.HasPrefix(peer, "[::ffff:"):
				peer = "[::ffff:" + client + "]:1234"
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

// TestKeyByIPTransitionAddresses: an IPv6 transition address is keyed by
// the IPv4 address it carries, under the IPv4 prefix rules, so a NAT64
// gateway or Teredo server does not put its clients in one /64 and a
// 6to4 site cannot mint a key per /64.
func TestKeyByIPTransitionAddresses(t *testing.T) {
	// A 64:ff9b:1::/48 address in the RFC 6052 /64 layout: the IPv4
	// address in bits 72-103, the u-octet and the suffix zero.
	localUse64 := netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 0, 1, 0, 0xab, 0, 203, 0, 113, 7}).String()
	runIPCases(t, mustKeyByIP(t), []ipCase{
		{"nat64 well-known", "[64:ff9b::203.0.113.7]:443", nil, "203.0.113.7"},
		{"nat64 well-known, hex", "64:ff9b::cb00:7107", nil, "203.0.113.7"},
		{"nat64 local-use /96 layout", "[64:ff9b:1::203.0.113.7]:1", nil, "203.0.113.7"},
		{"nat64 local-use /96 layout, subnet", "[64:ff9b:1:ab::203.0.113.7]:1", nil, "203.0.113.7"},
		{"nat64 local-use shorter layout: the whole address", "[" + localUse64 + "]:1", nil, localUse64},
		{"nat64 local-use, u-octet set: not RFC 6052", "[64:ff9b:1:ab:ff00::1]:1", nil, "64:ff9b:1:ab::/64"},
		{"ipv4-compatible", "[::203.0.113.7]:80", nil, "203.0.113.7"},
		{"unspecified is not ipv4-compatible", "[::]:80", nil, "::/64"},
		{"loopback is not ipv4-compatible", "[::1]:80", nil, "::/64"},
		{"6to4", "[2002:cb00:7107::1]:80", nil, "203.0.113.7"},
		{"6to4 other subnet, same site", "[2002:cb00:7107:ffff:1:2:3:4]:80", nil, "203.0.113.7"},
		{"teredo (RFC 4380 example)", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", nil, "192.0.2.45"},
		{"teredo other server, same client", "[2001:0:102:304:0:ffff:3fff:fdd2]:80", nil, "192.0.2.45"},
		{"not teredo", "[2001:1:4136:e378:8000:63bf:3fff:fdd2]:80", nil, "2001:1:4136:e378::/64"},
		{"documentation range untouched", "[2001:db8::1]:80", nil, "2001:db8::/64"},
	})
	runIPCases(t, mustKeyByIP(t, WithIPv4Prefix(24), WithIPv6Prefix(48)), []ipCase{
		{"nat64 under the ipv4 prefix", "[64:ff9b::203.0.113.7]:1", nil, "203.0.113.0/24"},
		{"6to4 under the ipv4 prefix", "[2002:cb00:71ff::1]:1", nil, "203.0.113.0/24"},
		{"teredo under the ipv4 prefix", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]:1", nil, "192.0.2.0/24"},
		{"native ipv6 under the ipv6 prefix", "[2001:db8:1:2::1]:1", nil, "2001:db8:1::/48"},
	})
	// Behind a trusted proxy, the forwarded address is decoded the same way.
	kf := mustKeyByIP(t, TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor())
	runIPCases(t, kf, []ipCase{
		{"forwarded nat64", proxy, []string{"X-Forwarded-For", "64:ff9b::203.0.113.7"}, "203.0.113.7"},
	})
}

// TestKeyByIPTransitionKeyCounts: 1,000 IPv4 clients behind one NAT64
// gateway or one Teredo server get 1,000 keys, not one; one IPv4 address
// behind 6to4 gets one key, not one per /64.
func TestKeyByIPTransitionKeyCounts(t *testing.T) {
	kf := mustKeyByIP(t)
	count := func(addr func(i int) netip.Addr) int {
		keys := map[string]bool{}
		for i := 0; i < 1000; i++ {
			k, err := kf(ipReq(netip.AddrPortFrom(addr(i), 443).String()))
			if err != nil {
				t.Fatal(err)
			}
			keys[k] = true
		}
		return len(keys)
	}
	v4 := func(i int) [4]byte { return [4]byte{198, 51, byte(i >> 8), byte(i)} }
	nat64 := count(func(i int) netip.Addr {
		c := v4(i)
		return netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 12: c[0], 13: c[1], 14: c[2], 15: c[3]})
	})
	teredo := count(func(i int) netip.Addr {
		c := v4(i)
		return netip.AddrFrom16([16]byte{0x20, 0x01, 4: 65, 5: 54, 6: 227, 7: 120, 12: ^c[0], 13: ^c[1], 14: ^c[2], 15: ^c[3]})
	})
	sixToFour := count(func(i int) netip.Addr {
		return netip.AddrFrom16([16]byte{0x20, 0x02, 203, 0, 113, 7, byte(i >> 8), byte(i), 15: 1})
	})
	if nat64 != 1000 || teredo != 1000 || sixToFour != 1 {
		t.Fatalf("keys: NAT64 %d, Teredo %d (want 1000 each); 6to4 %d (want 1)", nat64, teredo, sixToFour)
	}
}

// TestKeyByIPv4NoAlloc: a dotted-quad client under the default /32 is
// keyed by the text it was written in, which netip only accepts in
// canonical form: no formatting and no allocation, from the peer and from
// a trusted proxy's X-Forwarded-For. Non-canonical spellings still get the
// canonical key.
func TestKeyByIPv4NoAlloc(t *testing.T) {
	peerOnly := mustKeyByIP(t)
	xff := mustKeyByIP(t, TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor())
	cases := []struct {
		name string
		kf   KeyFunc
		r    *http.Request
		want string
	}{
		{"peer", peerOnly, ipReq("192.0.2.1:1234"), "192.0.2.1"},
		{"peer without port", peerOnly, ipReq("192.0.2.1"), "192.0.2.1"},
		{"xff", xff, ipReq(proxy, "X-Forwarded-For", "203.0.113.7"), "203.0.113.7"},
		{"xff with port and hops", xff, ipReq(proxy, "X-Forwarded-For", " 203.0.113.7:80 , 10.0.0.2"), "203.0.113.7"},
		{"xff, every hop trusted", xff, ipReq(proxy, "X-Forwarded-For", "10.0.0.3"), "10.0.0.3"},
		{"xff missing: the proxy", xff, ipReq(proxy), "10.0.0.1"},
	}
	for _, tc := range cases {
		if k, err := tc.kf(tc.r); err != nil || k != tc.want {
			t.Fatalf("%s: key = %q, %v; want %q", tc.name, k, err, tc.want)
		}
		if n := testing.AllocsPerRun(100, func() { tc.kf(tc.r) }); n != 0 {
			t.Errorf("%s: %v allocations per key; want 0", tc.name, n)
		}
	}
	for peer, want := range map[string]string{
		"[::ffff:192.0.2.1]:1":  "192.0.2.1",
		"::ffff:c000:201":       "192.0.2.1",
		"[64:ff9b::c000:201]:1": "192.0.2.1",
	} {
		if k, err := peerOnly(ipReq(peer)); err != nil || k != want {
			t.Errorf("%s: key = %q, %v; want %q", peer, k, err, want)
		}
	}
	for _, peer := range []string{"192.0.2.01:1", "192.000.2.1:1", "0192.0.2.1", "192.0.2:1", "192.0.2.1.5:1", "192.0.2.256:1"} {
		if k, err := peerOnly(ipReq(peer)); !errors.Is(err, ErrNoClientIP) {
			t.Errorf("%s: key = %q, %v; want ErrNoClientIP", peer, k, err)
		}
	}
}

func TestClientIP(t *testing.T) {
	client, err := ClientIP(TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor(), WithIPv6Prefix(48))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		peer, xff, want string
	}{
		{"198.51.100.9:1", "203.0.113.7", "198.51.100.9"},   // untrusted peer: header ignored
		{proxy, "6.6.6.6, 203.0.113.7", "203.0.113.7"},      // trusted: the walk
		{proxy, "[2001:db8:1:2::5]:443", "2001:db8:1:2::5"}, // not aggregated
		{proxy, "::ffff:203.0.113.7", "203.0.113.7"},        // unmapped
		{proxy, "2002:cb00:7107::1", "203.0.113.7"},         // 6to4: the IPv4 it carries
		{"[64:ff9b::cb00:7107]:1", "", "203.0.113.7"},       // NAT64 peer
		{proxy, "garbage", ""},                              // error
		{"@", "203.0.113.7", ""},                            // unix peer, not trusted
	} {
		var hdr []string
		if tc.xff != "" {
			hdr = []string{"X-Forwarded-For", tc.xff}
		}
		a, err := client(ipReq(tc.peer, hdr...))
		if tc.want == "" {
			if !errors.Is(err, ErrNoClientIP) {
				t.Errorf("%s %q: %v, %v; want ErrNoClientIP", tc.peer, tc.xff, a, err)
			}
			continue
		}
		if err != nil || a != netip.MustParseAddr(tc.want) {
			t.Errorf("%s %q: %v, %v; want %s", tc.peer, tc.xff, a, err, tc.want)
		}
	}
	if f, err := ClientIP(FromXForwardedFor()); !errors.Is(err, ErrInvalidOption) || f != nil {
		t.Fatalf("ClientIP without trusted proxies: %v; want ErrInvalidOption", err)
	}
}

// TestSkipClients: an exemption trusts exactly the proxies the key
// function trusts, so a client cannot exempt itself with a forged
// X-Forwarded-For, and a client that cannot be resolved is limited.
func TestSkipClients(t *testing.T) {
	office := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:aa::/48")}
	opts := []IPOption{TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor()}
	skip, err := SkipClients(office, opts...)
	if err != nil {
		t.Fatal(err)
	}
	xff := "X-Forwarded-For"
	for _, tc := range []struct {
		name string
		r    *http.Request
		want bool
	}{
		{"office client through the proxy", ipReq(proxy, xff, "198.51.100.20"), true},
		{"office ipv6 client through the proxy", ipReq(proxy, xff, "[2001:db8:aa:1::9]:443"), true},
		{"office client directly", ipReq("198.51.100.20:1"), true},
		{"other client through the proxy", ipReq(proxy, xff, "203.0.113.7"), false},
		{"forged office address from outside", ipReq("203.0.113.7:1", xff, "198.51.100.20"), false},
		{"forged left part through the proxy", ipReq(proxy, xff, "198.51.100.20, 203.0.113.7"), false},
		{"office client inside NAT64", ipReq("[64:ff9b::198.51.100.20]:1"), true},
		{"unresolvable: limited", ipReq(proxy, xff, "garbage"), false},
		{"no address: limited", ipReq("@"), false},
		{"the proxy itself", ipReq(proxy), false},
	} {
		if got := skip(tc.r); got != tc.want {
			t.Errorf("%s: skip = %v; want %v", tc.name, got, tc.want)
		}
	}
	for name, bad := range map[string]struct {
		prefixes []netip.Prefix
		opts     []IPOption
	}{
		"no prefixes":        {nil, nil},
		"invalid prefix":     {[]netip.Prefix{{}}, nil},
		"every ipv4":         {[]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, nil},
		"every ipv6":         {[]netip.Prefix{netip.MustParsePrefix("::/0")}, nil},
		"every ipv4, mapped": {[]netip.Prefix{netip.MustParsePrefix("::ffff:0:0/96")}, nil},
		"invalid options":    {office, []IPOption{FromXForwardedFor()}},
	} {
		if f, err := SkipClients(bad.prefixes, bad.opts...); !errors.Is(err, ErrInvalidOption) || f != nil {
			t.Errorf("%s: %v; want ErrInvalidOption", name, err)
		}
	}
}

// TestSkipClientsMiddleware: through the middleware, an exempt office
// client is never limited while a forged claim to be one is.
func TestSkipClientsMiddleware(t *testing.T) {
	opts := []IPOption{TrustProxies(netip.MustParsePrefix("10.0.0.0/8")), FromXForwardedFor()}
	key, err := KeyByIP(opts...)
	if err != nil {
		t.Fatal(err)
	}
	skip, err := SkipClients([]netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := NewTokenBucket(Rate{Limit: 1, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewMiddleware(lim, WithKeyFunc(key), WithSkip(skip))
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	status := func(r *http.Request) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := 0; i < 5; i++ {
		if c := status(ipReq(proxy, "X-Forwarded-For", "198.51.100.20")); c != http.StatusOK {
			t.Fatalf("office request %d: status %d; want 200", i, c)
		}
	}
	var codes []int
	for i := 0; i < 3; i++ {
		codes = append(codes, status(ipReq("203.0.113.7:1", "X-Forwarded-For", "198.51.100.20")))
	}
	if codes[0] != http.StatusOK || codes[1] != http.StatusTooManyRequests || codes[2] != http.StatusTooManyRequests {
		t.Fatalf("forged office claims: statuses %v; want 200, 429, 429", codes)
	}
}

// TestIPResolverAgreesWithKeyByIP: an adapter that hands IPResolver a
// call's peer and forwarding lines gets exactly the key and address that
// KeyByIP and ClientIP give an HTTP request carrying the same, including
// the refusals: forged headers from an untrusted peer are not believed,
// garbage and unix sockets are ErrNoClientIP.
func TestIPResolverAgreesWithKeyByIP(t *testing.T) {
	lb := netip.MustParsePrefix("10.0.0.0/8")
	configs := map[string][]IPOption{
		"peer":      nil,
		"xff":       {TrustProxies(lb), FromXForwardedFor()},
		"xff-hops":  {TrustProxies(lb), FromXForwardedForHops(2)},
		"header":    {TrustProxies(lb), FromHeader("X-Real-IP")},
		"forwarded": {TrustProxies(lb), FromForwarded()},
		"unix":      {TrustUnixSocket(), FromXForwardedFor()},
		"v6-48":     {WithIPv6Prefix(48), WithIPv4Prefix(24)},
	}
	peers := []string{"203.0.113.7:5000", "10.1.2.3:443", "[2001:db8:1:2::9]:80", "2001:db8::1", "@", "", "not-an-ip", "[::ffff:10.1.2.3]:1"}
	lines := [][]string{nil, {"198.51.100.1"}, {"198.51.100.1, 10.9.9.9"}, {"for=198.51.100.2"}, {"garbage"}, {"1.1.1.1", "2.2.2.2"}}
	for name, opts := range configs {
		res, err := NewIPResolver(opts...)
		if err != nil {
			t.Fatalf("%s: NewIPResolver: %v", name, err)
		}
		header := res.Header()
		if (header == "") != (name == "peer" || name == "v6-48") {
			t.Errorf("%s: Header() = %q", name, header)
		}
		key, client := mustKeyByIP(t, opts...), mustClientIP(t, opts...)
		for _, peer := range peers {
			for _, ls := range lines {
				r := ipReq(peer)
				if header != "" {
					r.Header[header] = ls
				}
				wantKey, wantKeyErr := key(r)
				gotKey, gotKeyErr := res.Key(peer, ls)
				wantAddr, wantAddrErr := client(r)
				gotAddr, gotAddrErr := res.Addr(peer, ls)
				if gotKey != wantKey || (gotKeyErr == nil) != (wantKeyErr == nil) || gotAddr != wantAddr || (gotAddrErr == nil) != (wantAddrErr == nil) {
					t.Errorf("%s, peer %q, %s %q: Key = %q, %v; Addr = %v, %v; KeyByIP gives %q, %v; ClientIP %v, %v",
						name, peer, header, ls, gotKey, gotKeyErr, gotAddr, gotAddrErr, wantKey, wantKeyErr, wantAddr, wantAddrErr)
				}
				if gotKeyErr != nil && !errors.Is(gotKeyErr, ErrNoClientIP) {
					t.Errorf("%s, peer %q: error %v does not wrap ErrNoClientIP", name, peer, gotKeyErr)
				}
			}
		}
	}
	if k, err := mustIPResolver(t).Key("203.0.113.7:5000", []string{"198.51.100.1"}); k != "203.0.113.7" || err != nil {
		t.Errorf("default resolver believed a forwarding header: %q, %v", k, err)
	}
	if _, err := NewIPResolver(FromXForwardedFor()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a source without trusted proxies: %v, want ErrInvalidOption", err)
	}
}

func mustIPResolver(t *testing.T, opts ...IPOption) *IPResolver {
	t.Helper()
	r, err := NewIPResolver(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustClientIP(t *testing.T, opts ...IPOption) func(*http.Request) (netip.Addr, error) {
	t.Helper()
	f, err := ClientIP(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// BenchmarkParseIP: RemoteAddr's common forms through parseIP (a dotted
// quad in one pass) against parseIPForms, the parse it short-cuts, in
// alternating rounds of one run (internal/interleave): base-cpu-ns/call
// is parseIPForms' CPU time a call, parseIP-cpu-ns/call the difference.
// The IPv4 addresses vary as the benchmarks module's clients do, so that
// the branches on each field's length are not all predicted.
func BenchmarkParseIP(b *testing.B) {
	v4 := make([]string, 4096)
	for i := range v4 {
		v4[i] = fmt.Sprintf("10.%d.%d.%d:40000", byte(i>>16), byte(i>>8), byte(i))
	}
	for _, addrs := range [][]string{v4, {"[2001:db8::1]:40000"}} {
		b.Run(addrs[0], func(b *testing.B) {
			parse := func(p func(string, bool) (netip.Addr, string, bool)) func() error {
				i := 0
				return func() error {
					i = (i + 1) % len(addrs)
					if _, _, ok := p(addrs[i], false); !ok {
						return fmt.Errorf("%q refused", addrs[i])
					}
					return nil
				}
			}
			interleave.Bench(b, []interleave.Case{
				{Name: "parseIPForms", Call: parse(parseIPForms)},
				{Name: "parseIP", Call: parse(parseIP)},
			}, 1000)
		})
	}
}
