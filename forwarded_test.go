package floodgate

import (
	"net/netip"
	"strings"
	"testing"
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
