package floodgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The seed corpora of these targets are in testdata/fuzz/<FuzzName>. Run
// one longer with, e.g.,
//
//	go test -run '^$' -fuzz '^FuzzKeyByIP$' -fuzztime 5m

// fuzzIPConfigs are the resolver configurations the fuzz targets check;
// each trusts 10.0.0.0/8 and loopback, "unix" unix-socket peers as well.
func fuzzIPConfigs(t testing.TB) map[string]KeyFunc {
	trust := TrustProxies(append(LoopbackPrefixes(), netip.MustParsePrefix("10.0.0.0/8"))...)
	return map[string]KeyFunc{
		"peer":      mustKeyByIP(t),
		"xff":       mustKeyByIP(t, trust, FromXForwardedFor()),
		"hops":      mustKeyByIP(t, trust, FromXForwardedForHops(2)),
		"header":    mustKeyByIP(t, trust, FromHeader("X-Real-IP")),
		"forwarded": mustKeyByIP(t, trust, FromForwarded()),
		"unix":      mustKeyByIP(t, trust, TrustUnixSocket(), FromXForwardedFor()),
	}
}

// checkIPKey fails unless k is a key KeyByIP's defaults can produce: an
// unmapped IPv4 address without zone, a whole NAT64 local-use address
// whose layout is unknown, or a masked IPv6 /64 that is not a transition
// address, all in canonical form.
func checkIPKey(t *testing.T, k string) {
	t.Helper()
	if a, err := netip.ParseAddr(k); err == nil {
		localUse := netip.MustParsePrefix("64:ff9b:1::/48")
		if !(a.Is4() || localUse.Contains(a) && a.Zone() == "") || a.String() != k {
			t.Fatalf("key %q is not a canonical IPv4 address", k)
		}
		return
	}
	if p, err := netip.ParsePrefix(k); err == nil {
		for _, tunnel := range []string{"2002::/16", "2001::/32"} { // 6to4, Teredo
			if netip.MustParsePrefix(tunnel).Overlaps(p) {
				t.Fatalf("key %q is the /64 of a transition address", k)
			}
		}
	}
	p, err := netip.ParsePrefix(k)
	if err != nil || p.Bits() != 64 || p != p.Masked() || !p.Addr().Is6() || p.Addr().Is4In6() || p.String() != k {
		t.Fatalf("key %q is neither an IPv4 address nor a canonical IPv6 /64", k)
	}
}

// setLines sets header name to the lines of v, so that one input can also
// stand for many header lines.
func setLines(h http.Header, name, v string) {
	if v != "" {
		h[name] = strings.Split(v, "\n")
	}
}

// FuzzKeyByIP: the resolver never panics; it returns a well-formed key or
// an error wrapping ErrNoClientIP; and from an untrusted peer the headers
// never matter.
func FuzzKeyByIP(f *testing.F) {
	configs := fuzzIPConfigs(f)
	f.Fuzz(func(t *testing.T, peer, xff, realIP, forwarded string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		setLines(r.Header, "X-Forwarded-For", xff)
		setLines(r.Header, "X-Real-Ip", realIP)
		setLines(r.Header, "Forwarded", forwarded)
		for name, kf := range configs {
			r.RemoteAddr = peer
			k, err := kf(r)
			if err != nil {
				if !errors.Is(err, ErrNoClientIP) {
					t.Fatalf("%s: error %v does not wrap ErrNoClientIP", name, err)
				}
			} else {
				checkIPKey(t, k)
			}
			r.RemoteAddr = "198.51.100.9:443"
			if k, err := kf(r); err != nil || k != "198.51.100.9" {
				t.Fatalf("%s: untrusted peer keyed %q, %v", name, k, err)
			}
		}
	})
}

// FuzzForwarded: whatever a client writes into Forwarded or
// X-Forwarded-For, a trusted proxy that appends the client's address (to
// the same line or in a line of its own) makes that address the key.
func FuzzForwarded(f *testing.F) {
	configs := fuzzIPConfigs(f)
	f.Fuzz(func(t *testing.T, forged string) {
		for _, own := range []bool{false, true} {
			for _, c := range []struct{ config, header, appended string }{
				{"forwarded", "Forwarded", `for="203.0.113.7:4711";proto=https`},
				{"xff", "X-Forwarded-For", "203.0.113.7"},
			} {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = "10.0.0.1:80"
				lines := []string{forged}
				if own {
					lines = append(lines, c.appended)
				} else {
					lines[0] += ", " + c.appended
				}
				r.Header[c.header] = lines
				if k, err := configs[c.config](r); err != nil || k != "203.0.113.7" {
					t.Fatalf("%s after %q: key %q, %v; want the appended client", c.header, forged, k, err)
				}
				// Alone, the forged value yields a valid key or a clean error.
				r.Header[c.header] = []string{forged}
				if k, err := configs[c.config](r); err != nil {
					if !errors.Is(err, ErrNoClientIP) {
						t.Fatalf("%s %q: error %v does not wrap ErrNoClientIP", c.header, forged, err)
					}
				} else {
					checkIPKey(t, k)
				}
			}
		}
	})
}

// FuzzKeyByJSONField: the handler always gets the body intact, errors are
// the documented ones, and a key is the one value the body gives the field.
func FuzzKeyByJSONField(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte, field string, maxBytes uint16) {
		max := int64(maxBytes) + 1
		kf, err := KeyByJSONField(field, max)
		if field == "" {
			if !errors.Is(err, ErrInvalidOption) || kf != nil {
				t.Fatalf("empty field: %v; want a nil KeyFunc and ErrInvalidOption", err)
			}
			return
		}
		r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		k, err := kf(r)
		got, rerr := io.ReadAll(r.Body)
		if rerr != nil || !bytes.Equal(got, body) {
			t.Fatalf("handler reads %q, %v; want the body %q", got, rerr, body)
		}
		switch {
		case err != nil:
			if !errors.Is(err, ErrNoKey) && !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("err %v wraps neither ErrNoKey nor ErrInvalidBody", err)
			}
			return
		}
		if int64(len(body)) > max {
			t.Fatalf("key %q from a body of %d bytes, over the bound %d", k, len(body), max)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("key %q from a body encoding/json refuses: %v", k, err)
		}
		n := 0
		for name, v := range m {
			if strings.EqualFold(name, field) {
				n++
				if s, _ := v.(string); s != k || k == "" {
					t.Fatalf("key %q; the body's %q is %v", k, name, v)
				}
			}
		}
		if n != 1 {
			t.Fatalf("key %q, but %d fields match %q", k, n, field)
		}
	})
}

// FuzzNormalizePattern: never panics; a pattern is valid UTF-8 whose braces
// are all escapes or placeholders; spelling it out normalizes to itself;
// a name without numbers has no placeholder; white space around a name
// does not matter.
func FuzzNormalizePattern(f *testing.F) {
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := NormalizePattern(s)
		if !ok {
			if p != "" {
				t.Fatalf("NormalizePattern(%q) = %q with ok false", s, p)
			}
		} else {
			if !utf8.ValidString(p) || p == "" {
				t.Fatalf("NormalizePattern(%q) = %q is empty or not UTF-8", s, p)
			}
			name, wellFormed := renderPattern(p)
			if !wellFormed {
				t.Fatalf("NormalizePattern(%q) = %q has a forged or stray brace", s, p)
			}
			if i := strings.IndexFunc(p, func(r rune) bool { return ignorable(r) || refused(r) }); i >= 0 {
				t.Fatalf("NormalizePattern(%q) = %q keeps a mark, an invisible or a refused code point at %d", s, p, i)
			}
			if again, ok2 := NormalizePattern(name); !ok2 || again != p {
				t.Fatalf("NormalizePattern(%q) = %q, but its spelling %q gives %q, %v", s, p, name, again, ok2)
			}
			hasNumber := strings.IndexFunc(s, func(r rune) bool { return unicode.IsNumber(foldRune(r)) }) >= 0
			if !hasNumber && strings.Contains(name, "0") {
				t.Fatalf("NormalizePattern(%q) = %q: a placeholder without a number", s, p)
			}
		}
		if len(s)+6 <= maxPatternInput {
			if p2, ok2 := NormalizePattern(" \t" + s + "\u200b"); p2 != p || ok2 != ok {
				t.Fatalf("padding changes %q, %v to %q, %v", p, ok, p2, ok2)
			}
		}
	})
}

// FuzzKeyByHeader: whatever lines a request gives a header (split at
// NUL), KeyByHeader's key is the value a handler reads from any of them
// — Header.Get, the last line, the first or last non-empty one, trimmed
// of spaces and tabs —; "no key" means none gives a value; an ambiguity
// is refused only where two lines do give different values.
func FuzzKeyByHeader(f *testing.F) {
	f.Add("x1\x00victim")
	f.Add("\x00victim")
	f.Add(" k1\x00k1\t")
	f.Add("victim\x00 ")
	kf := mustKey(KeyByHeader("X-User"))
	f.Fuzz(func(t *testing.T, joined string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		lines := strings.Split(joined, "\x00")
		r.Header["X-User"] = lines
		key, err := kf(r)
		read := map[string]bool{}
		for _, l := range lines {
			read[strings.Trim(l, " \t")] = true
		}
		switch {
		case err == nil && (len(read) != 1 || !read[key] || key == ""):
			t.Fatalf("key %q; the lines %q give %d values", key, lines, len(read))
		case errors.Is(err, ErrNoKey) && (len(read) != 1 || !read[""]):
			t.Fatalf("%v; the lines %q give a value", err, lines)
		case errors.Is(err, ErrAmbiguousKey) && len(read) < 2:
			t.Fatalf("%v; the lines %q give one value", err, lines)
		case err != nil && !errors.Is(err, ErrNoKey) && !errors.Is(err, ErrAmbiguousKey):
			t.Fatalf("%v, undocumented", err)
		}
	})
}
