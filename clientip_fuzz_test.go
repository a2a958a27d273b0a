package floodgate

import (
	"net/netip"
	"strconv"
	"testing"
)

// Run it longer with
//
//	go test -run '^$' -fuzz '^FuzzParseIPFastPath$' -fuzztime 5m

// parseIPCases are strings at the edges of parseDotted's form: what it
// must read, what it must leave to parseIPForms, and what both refuse.
var parseIPCases = []string{
	"", ":", ".", "...", "1.2.3.4", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:80",
	"1.2.3.4:65535", "1.2.3.4:65536", "1.2.3.4:99999", "1.2.3.4:000080",
	"1.2.3.4:00080", "1.2.3.4:_p1", "1.2.3.4:-1", "1.2.3.4:+1", "1.2.3.4::80",
	"1.2.3.4:80:80", "0.0.0.0", "0.0.0.0:0", "255.255.255.255:65535",
	"256.1.1.1", "1.2.3.256:80", "01.2.3.4", "1.02.3.4:80", "1.2.3.00",
	"1.2.3.0", "1.2.3", "1.2.3.4.5", "1.2.3.4.", ".1.2.3.4", "1..2.3",
	"1234.1.1.1", "1.2.3.1234", "1.2.3.4 ", " 1.2.3.4", "1.2.3.4%eth0",
	"1.2.3.4%eth0:80", "1.2.3.4%", "[1.2.3.4]:80", "[1.2.3.4]", "::1",
	"[::1]:80", "::ffff:1.2.3.4", "[::ffff:1.2.3.4]:80", "fe80::1%eth0",
	"[fe80::1%eth0]:80", "2001:db8::1", "[2001:db8::1]:8080", "@",
	"1.2.3.4\x00", "1.2.3.4:8\x000", "١.2.3.4", "1.2.3.4:٨٠", "0x1.2.3.4",
	"1.2.3.-4", "1.2.3.4/32", "192.168.001.1", "192.168.1.1:080",
}

// TestParseIPFastPathAgrees pins parseDotted's results on the forms it
// must read, and that parseIP answers as parseIPForms (the parse it
// short-cuts) on every edge case.
func TestParseIPFastPathAgrees(t *testing.T) {
	for _, tt := range []struct {
		s, host string
		ip      [4]byte
	}{
		{"192.0.2.1:40000", "192.0.2.1", [4]byte{192, 0, 2, 1}},
		{"10.0.0.255", "10.0.0.255", [4]byte{10, 0, 0, 255}},
		{"0.0.0.0:0", "0.0.0.0", [4]byte{}},
		{"255.255.255.255:65535", "255.255.255.255", [4]byte{255, 255, 255, 255}},
	} {
		ip, host, ok := parseDotted(tt.s)
		if !ok || ip != tt.ip || host != tt.host {
			t.Errorf("parseDotted(%q) = %v, %q, %v; want %v, %q, true", tt.s, ip, host, ok, tt.ip, tt.host)
		}
	}
	for _, s := range []string{"01.2.3.4", "1.2.3.4:65536", "1.2.3.4:", "1.2.3.4:_p1", "1.2.3.4%eth0", "::1", "1.2.3"} {
		if _, _, ok := parseDotted(s); ok {
			t.Errorf("parseDotted(%q) accepted it; it is not a canonical dotted quad with a decimal port", s)
		}
	}
	for _, s := range parseIPCases {
		checkParseIPAgrees(t, s)
	}
}

// FuzzParseIPFastPath: parseIP, with its one-pass reading of a dotted
// quad, returns exactly what parseIPForms returns for every string and
// either port syntax (RemoteAddr's and X-Forwarded-For's, Forwarded's):
// the same address, the same text (the /32 key) and the same refusal.
func FuzzParseIPFastPath(f *testing.F) {
	for _, s := range parseIPCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkParseIPAgrees(t, s)
	})
}

// checkParseIPAgrees fails unless parseIP and parseIPForms agree on s,
// and a dotted quad parseDotted reads is the address netip reads.
func checkParseIPAgrees(t *testing.T, s string) {
	t.Helper()
	for _, obf := range []bool{false, true} {
		a, text, ok := parseIP(s, obf)
		wa, wtext, wok := parseIPForms(s, obf)
		if a != wa || text != wtext || ok != wok {
			t.Fatalf("parseIP(%q, %v) = %v, %q, %v; parseIPForms gives %v, %q, %v", s, obf, a, text, ok, wa, wtext, wok)
		}
	}
	ip, host, ok := parseDotted(s)
	if !ok {
		return
	}
	want, err := netip.ParseAddr(host)
	if err != nil || want != netip.AddrFrom4(ip) || want.String() != host {
		t.Fatalf("parseDotted(%q) = %v, %q; netip reads %q as %v, %v", s, ip, host, host, want, err)
	}
	if port := s[len(host):]; port != "" {
		if n, err := strconv.ParseUint(port[1:], 10, 16); port[0] != ':' || err != nil || n > 65535 || len(port) > 6 {
			t.Fatalf("parseDotted(%q) accepted the port %q", s, port)
		}
	}
}
