package floodgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// KeyFunc returns the key a request is limited by. An error means no key
// could be formed; the middleware's error policy then decides the answer,
// so a malformed request never silently shares an "unknown" bucket.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoClientIP reports a request whose client address cannot be parsed.
var ErrNoClientIP = errors.New("floodgate: no valid client IP")

// ErrNoKey reports a request that does not carry what a key function needs:
// a missing or empty header, query parameter, form or JSON field, route
// pattern, or a value from which no pattern can be formed. A
// PolicySelector treats it as "this policy does not apply" and tries the
// next one; every other key error stops the request.
var ErrNoKey = errors.New("floodgate: request carries no key")

// ErrInvalidBody reports a request body a key function could not use: too
// large for its bound, not the JSON it expects, or failing to read. It does
// not wrap ErrNoKey, so a PolicySelector does not fall back to a weaker
// limit for a body the handler might still accept.
var ErrInvalidBody = errors.New("floodgate: request body cannot be read for a key")

// MaxFormBytes is the most of a request body KeyByForm reads. A larger
// body gets ErrInvalidBody.
const MaxFormBytes = 64 << 10

// MaxForwardedEntries bounds the work spent on a forwarding header: at most
// this many list entries (empty ones included, across all header lines) are
// examined, counting from the right, and an entry longer than 512 bytes is
// refused. A chain whose rightmost MaxForwardedEntries entries are all
// trusted proxies yields ErrNoClientIP rather than a guess. Real proxy
// chains are a handful of hops long; a header with thousands of entries or
// lines costs no more than one with MaxForwardedEntries.
const MaxForwardedEntries = 32

// maxEntryLen is the longest forwarding-list entry examined. An address
// with brackets, zone and port fits many times over; a Forwarded element
// also carries by=, host= and proto=.
const maxEntryLen = 512

// IPOption configures KeyByIP.
type IPOption func(*ipConfig) error

// ipSource is where a trusted peer's client address is read from.
type ipSource int

const (
	sourcePeer      ipSource = iota // RemoteAddr only
	sourceXFF                       // X-Forwarded-For, skipping trusted hops
	sourceXFFHops                   // X-Forwarded-For, a fixed count of hops
	sourceHeader                    // a single-address header
	sourceForwarded                 // RFC 7239 Forwarded: for=
)

type ipConfig struct {
	v4Bits  int
	v6Bits  int
	trusted []netip.Prefix
	source  ipSource
	header  string // canonical header key read by the source
	hops    int    // sourceXFFHops
}

// setSource records the one forwarding source; two are a configuration
// error, since which one wins would be a guess.
func (c *ipConfig) setSource(s ipSource, header string) error {
	if c.source != sourcePeer {
		return fmt.Errorf("%w: more than one client-address source (FromXForwardedFor, FromXForwardedForHops, FromHeader, FromForwarded); choose one", ErrInvalidOption)
	}
	c.source, c.header = s, header
	return nil
}

// TrustProxies sets the proxies whose forwarding headers are believed: a
// forwarding header is read only when the TCP peer lies in one of these
// prefixes, and, walking X-Forwarded-For or Forwarded, entries in them are
// skipped as proxy hops. IPv4-mapped IPv6 prefixes are converted to IPv4.
// It may be given more than once; the prefixes add up.
//
// Trusting proxies without choosing a source (FromXForwardedFor,
// FromXForwardedForHops, FromHeader or FromForwarded) is an error: every
// client behind the proxy would otherwise share the proxy's key.
func TrustProxies(prefixes ...netip.Prefix) IPOption {
	return func(c *ipConfig) error {
		for _, p := range prefixes {
			if !p.IsValid() {
				return fmt.Errorf("%w: invalid trusted proxy prefix %v", ErrInvalidOption, p)
			}
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			c.trusted = append(c.trusted, p.Masked())
		}
		return nil
	}
}

// FromXForwardedFor reads the client address from X-Forwarded-For when the
// peer is a trusted proxy. All header lines are merged in order (RFC 9110
// §5.3), the list is walked from the right, entries inside the trusted
// prefixes are skipped as proxy hops and the first other entry is the
// client: the part a client may forge, on the left, is never reached as
// long as the proxies append what they saw.
//
// Entries may carry ports, brackets and zones. Empty entries are ignored
// (RFC 9110 §5.6.1). If the header is missing or empty, the trusted peer
// itself is the client (a health check, a request the proxy made on its
// own); if every entry is trusted, the leftmost is (the request came from
// inside the trusted network). The first untrusted entry that is not an IP
// address (garbage, "unknown") yields ErrNoClientIP: the entries beyond it
// cannot be trusted and the proxy's key would be a shared bucket.
func FromXForwardedFor() IPOption {
	return func(c *ipConfig) error { return c.setSource(sourceXFF, "X-Forwarded-For") }
}

// FromXForwardedForHops reads the client address from X-Forwarded-For as
// the n-th entry from the right, for deployments that know how many
// proxies (n, counting the peer) append to the header but not their
// addresses: n = 1 takes the rightmost entry. The peer must still be a
// trusted proxy (TrustProxies; PrivatePrefixes fits a load balancer inside
// a private network). n must be in 1..MaxForwardedEntries. Empty entries
// do not count; with fewer than n entries the leftmost is taken, with none
// the peer. It cannot be combined with FromXForwardedFor.
func FromXForwardedForHops(n int) IPOption {
	return func(c *ipConfig) error {
		if n < 1 || n > MaxForwardedEntries {
			return fmt.Errorf("%w: X-Forwarded-For hop count %d must be in 1..%d", ErrInvalidOption, n, MaxForwardedEntries)
		}
		c.hops = n
		return c.setSource(sourceXFFHops, "X-Forwarded-For")
	}
}

// FromHeader reads the client address from a header that holds a single
// address, such as X-Real-IP or CF-Connecting-IP, when the peer is a
// trusted proxy. The value may carry a port, brackets and a zone. A
// missing or empty header means the peer itself is the client; a value
// that is not one address, or the header given more than once, yields
// ErrNoClientIP. X-Forwarded-For and Forwarded are lists and are refused
// here: use FromXForwardedFor or FromForwarded.
func FromHeader(name string) IPOption {
	return func(c *ipConfig) error {
		if !validHeaderName(name) {
			return fmt.Errorf("%w: header name %q is not an HTTP token", ErrInvalidOption, name)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if key == "X-Forwarded-For" || key == "Forwarded" {
			return fmt.Errorf("%w: %s is a list; use FromXForwardedFor or FromForwarded", ErrInvalidOption, key)
		}
		return c.setSource(sourceHeader, key)
	}
}

// FromForwarded reads the client address from the RFC 7239 Forwarded
// header when the peer is a trusted proxy, walking its elements like
// FromXForwardedFor walks X-Forwarded-For and taking the for= parameter of
// each. Quoted values, bracketed IPv6 addresses and ports (numeric or
// obfuscated) are understood; commas and semicolons inside quoted strings
// do not split. An untrusted hop whose for= is an obfuscated identifier
// ("_hidden"), "unknown", missing, or malformed yields ErrNoClientIP: the
// proxy hid the client, and keying by the proxy would put every hidden
// client in one bucket. A missing header means the peer is the client.
func FromForwarded() IPOption {
	return func(c *ipConfig) error { return c.setSource(sourceForwarded, "Forwarded") }
}

// WithIPv6Prefix groups IPv6 clients by their first bits bits (default 64,
// since a single subscriber usually controls a whole /64 and can hop
// between its addresses at will). bits must be in 16..128.
func WithIPv6Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 16 || bits > 128 {
			return fmt.Errorf("%w: IPv6 prefix /%d must be in /16../128", ErrInvalidOption, bits)
		}
		c.v6Bits = bits
		return nil
	}
}

// WithIPv4Prefix groups IPv4 clients by their first bits bits (default 32:
// one key per address). bits must be in 8..32; shorter prefixes would put
// unrelated networks in one bucket.
func WithIPv4Prefix(bits int) IPOption {
	return func(c *ipConfig) error {
		if bits < 8 || bits > 32 {
			return fmt.Errorf("%w: IPv4 prefix /%d must be in /8../32", ErrInvalidOption, bits)
		}
		c.v4Bits = bits
		return nil
	}
}

// LoopbackPrefixes returns the loopback ranges 127.0.0.0/8 and ::1/128,
// for a proxy on the same host. The slice is new on every call.
func LoopbackPrefixes() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("::1/128"),
	}
}

// PrivatePrefixes returns the private ranges of RFC 1918 (10.0.0.0/8,
// 172.16.0.0/12, 192.168.0.0/16) and RFC 4193 (fc00::/7), the same set as
// netip.Addr.IsPrivate, for proxies inside a private network. The slice is
// new on every call.
func PrivatePrefixes() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("fc00::/7"),
	}
}

// KeyByIP returns a KeyFunc that keys a request by its client IP address.
//
// Without options it uses the TCP peer (Request.RemoteAddr) only: no
// forwarding header is believed, so a client cannot choose its own key.
// Behind a reverse proxy, name the proxies with TrustProxies and the header
// they set with one of FromXForwardedFor, FromXForwardedForHops, FromHeader
// or FromForwarded; the header is read only when the peer is trusted, so a
// client connecting directly still gets its own address. A source without
// trusted proxies, trusted proxies without a source, or two sources are
// errors wrapping ErrInvalidOption.
//
// The key is the address in canonical form ("192.0.2.1", "2001:db8::1"),
// or its prefix when aggregated ("2001:db8:1:2::/64"): IPv4-mapped IPv6
// addresses are unmapped, zones and ports dropped, and IPv6 clients are
// grouped by their /64 unless WithIPv6Prefix says otherwise. A request
// whose address cannot be determined gets an error wrapping ErrNoClientIP,
// never a shared key. The work per request is bounded (see
// MaxForwardedEntries) and, on success, allocates only the key.
func KeyByIP(opts ...IPOption) (KeyFunc, error) {
	c := &ipConfig{v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil IP option", ErrInvalidOption)
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	switch {
	case c.source != sourcePeer && len(c.trusted) == 0:
		return nil, fmt.Errorf("%w: a forwarding header source needs TrustProxies: believing it from any peer lets every client choose its key", ErrInvalidOption)
	case c.source == sourcePeer && len(c.trusted) > 0:
		return nil, fmt.Errorf("%w: TrustProxies without a forwarding header source (FromXForwardedFor, FromXForwardedForHops, FromHeader, FromForwarded) would key every proxied client by the proxy", ErrInvalidOption)
	}
	return func(r *http.Request) (string, error) {
		a, err := c.clientAddr(r)
		if err != nil {
			return "", err
		}
		return c.key(a), nil
	}, nil
}

// clientAddr resolves the client address of r, unmapped and without zone.
func (c *ipConfig) clientAddr(r *http.Request) (netip.Addr, error) {
	peer, ok := parseIP(r.RemoteAddr, false)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: RemoteAddr %q", ErrNoClientIP, clip(r.RemoteAddr))
	}
	if c.source == sourcePeer || !c.isTrusted(peer) {
		return peer, nil
	}
	// Indexing the map with the pre-canonicalized key avoids
	// Header.Values' per-call canonicalization.
	lines := r.Header[c.header]
	switch c.source {
	case sourceXFF:
		return c.walk(lines, peer, false)
	case sourceForwarded:
		return c.walk(lines, peer, true)
	case sourceXFFHops:
		return c.nthFromRight(lines, peer)
	default: // sourceHeader
		return singleAddr(c.header, lines, peer)
	}
}

func (c *ipConfig) isTrusted(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walk implements FromXForwardedFor (forwarded false) and FromForwarded:
// right to left, skip trusted hops, return the first untrusted address.
func (c *ipConfig) walk(lines []string, peer netip.Addr, forwarded bool) (netip.Addr, error) {
	w := listWalker{lines: lines, quoted: forwarded}
	var last netip.Addr // leftmost entry seen, every one of them trusted
	for {
		e, ok, err := w.next()
		if err != nil {
			return netip.Addr{}, err
		}
		if !ok {
			break
		}
		var a netip.Addr
		if forwarded {
			a, err = forwardedFor(e)
		} else {
			a, err = xffAddr(e)
		}
		if err != nil {
			return netip.Addr{}, err
		}
		if !c.isTrusted(a) {
			return a, nil
		}
		last = a
	}
	if last.IsValid() {
		return last, nil
	}
	return peer, nil
}

// nthFromRight implements FromXForwardedForHops.
func (c *ipConfig) nthFromRight(lines []string, peer netip.Addr) (netip.Addr, error) {
	w := listWalker{lines: lines}
	var e string
	for n := 0; n < c.hops; n++ {
		next, ok, err := w.next()
		if err != nil {
			return netip.Addr{}, err
		}
		if !ok {
			break
		}
		e = next
	}
	if e == "" {
		return peer, nil
	}
	return xffAddr(e)
}

// singleAddr implements FromHeader.
func singleAddr(name string, lines []string, peer netip.Addr) (netip.Addr, error) {
	switch len(lines) {
	case 0:
		return peer, nil
	case 1:
	default:
		return netip.Addr{}, fmt.Errorf("%w: %s given %d times", ErrNoClientIP, name, len(lines))
	}
	v := trimOWS(lines[0])
	if v == "" {
		return peer, nil
	}
	a, ok := parseIP(v, false)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: %s %q is not an IP address", ErrNoClientIP, name, clip(v))
	}
	return a, nil
}

func xffAddr(e string) (netip.Addr, error) {
	a, ok := parseIP(e, false)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: X-Forwarded-For entry %q is not an IP address", ErrNoClientIP, clip(e))
	}
	return a, nil
}

// key formats addr aggregated to the configured prefix. It formats into a
// stack buffer so that the key string is the only allocation.
func (c *ipConfig) key(addr netip.Addr) string {
	bits := c.v6Bits
	if addr.Is4() {
		bits = c.v4Bits
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	if bits == addr.BitLen() {
		return string(addr.AppendTo(buf[:0]))
	}
	p, _ := addr.Prefix(bits) // bits is validated: cannot fail
	return string(p.AppendTo(buf[:0]))
}

// listWalker yields the entries of a comma-separated header list from right
// to left, the last header line first, as if the lines were joined with
// commas. For Forwarded (quoted), commas inside quoted strings do not
// separate. It stops with ErrNoClientIP after MaxForwardedEntries entries
// or at an entry longer than maxEntryLen, so hostile headers cost a bounded
// amount of work whatever their size.
type listWalker struct {
	lines  []string
	cur    string // unread left part of the current line
	inLine bool
	quoted bool
	seen   int
}

// next returns the next non-empty entry to the left, trimmed of white
// space; ok is false when the list is exhausted.
func (w *listWalker) next() (entry string, ok bool, err error) {
	for {
		if !w.inLine {
			if len(w.lines) == 0 {
				return "", false, nil
			}
			w.cur, w.lines = w.lines[len(w.lines)-1], w.lines[:len(w.lines)-1]
			w.inLine = true
		}
		if w.seen == MaxForwardedEntries {
			return "", false, fmt.Errorf("%w: more than %d forwarding entries examined", ErrNoClientIP, MaxForwardedEntries)
		}
		w.seen++
		sep, err := w.lastSeparator()
		if err != nil {
			return "", false, err
		}
		e := w.cur[sep+1:]
		if sep < 0 {
			w.cur, w.inLine = "", false
		} else {
			w.cur = w.cur[:sep]
		}
		if e = trimOWS(e); e != "" {
			return e, true, nil
		}
	}
}

// lastSeparator returns the index of the comma that ends the entry before
// the last one in w.cur, or -1 if the last entry starts the line. It looks
// at no more than maxEntryLen+1 bytes.
func (w *listWalker) lastSeparator() (int, error) {
	s := w.cur
	lo := max(0, len(s)-maxEntryLen-1)
	if !w.quoted {
		if i := strings.LastIndexByte(s[lo:], ','); i >= 0 {
			return lo + i, nil
		}
	} else {
		inQuote := false
		for i := len(s) - 1; i >= lo; i-- {
			switch s[i] {
			case '"':
				// Walking backwards, a quote ends a quoted string unless
				// an odd number of backslashes escapes it.
				if !inQuote {
					inQuote = true
				} else if backslashesBefore(s, i, lo)%2 == 0 {
					inQuote = false
				}
			case ',':
				if !inQuote {
					return i, nil
				}
			}
		}
		if inQuote && lo == 0 {
			return 0, fmt.Errorf("%w: Forwarded has an unterminated quoted string", ErrNoClientIP)
		}
	}
	if lo > 0 {
		return 0, fmt.Errorf("%w: forwarding entry longer than %d bytes", ErrNoClientIP, maxEntryLen)
	}
	return -1, nil
}

func backslashesBefore(s string, i, lo int) int {
	n := 0
	for i--; i >= lo && s[i] == '\\'; i-- {
		n++
	}
	return n
}

// forwardedFor returns the address in the for= parameter of one Forwarded
// element (RFC 7239 §4: pairs separated by semicolons, each parameter at
// most once, values a token or a quoted string).
func forwardedFor(elem string) (netip.Addr, error) {
	var value string
	found := false
	for rest := elem; rest != ""; {
		pair := rest
		if i := indexUnquoted(rest, ';'); i >= 0 {
			pair, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		name, v, ok := strings.Cut(trimOWS(pair), "=")
		if !ok || !strings.EqualFold(trimOWS(name), "for") {
			continue
		}
		if found {
			return netip.Addr{}, fmt.Errorf("%w: Forwarded element %q repeats for=", ErrNoClientIP, clip(elem))
		}
		value, found = trimOWS(v), true
	}
	if !found {
		return netip.Addr{}, fmt.Errorf("%w: Forwarded element %q has no for=", ErrNoClientIP, clip(elem))
	}
	node, ok := unquote(value)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: Forwarded for=%s is malformed", ErrNoClientIP, clip(value))
	}
	if isObfuscated(node) {
		return netip.Addr{}, fmt.Errorf("%w: Forwarded for=%s hides the client", ErrNoClientIP, clip(value))
	}
	a, ok := parseIP(node, true)
	if !ok {
		return netip.Addr{}, fmt.Errorf("%w: Forwarded for=%s is not an IP address", ErrNoClientIP, clip(value))
	}
	return a, nil
}

// indexUnquoted is strings.IndexByte outside quoted strings.
func indexUnquoted(s string, c byte) int {
	inQuote := false
	for i := 0; i < len(s); i++ {
		switch {
		case inQuote && s[i] == '\\':
			i++
		case s[i] == '"':
			inQuote = !inQuote
		case !inQuote && s[i] == c:
			return i
		}
	}
	return -1
}

// unquote returns the content of a quoted string, or s itself if it is not
// quoted. Quoted pairs are rare in a node (RFC 7239 §6 needs none), so only
// then is a copy made.
func unquote(s string) (string, bool) {
	if s == "" || s[0] != '"' {
		return s, !strings.ContainsAny(s, "\"\\")
	}
	if len(s) < 2 || s[len(s)-1] != '"' {
		return "", false
	}
	s = s[1 : len(s)-1]
	if !strings.ContainsAny(s, "\"\\") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			return "", false
		case '\\':
			i++
			if i == len(s) {
				return "", false
			}
		}
		b.WriteByte(s[i])
	}
	return b.String(), true
}

// isObfuscated reports a node name that is not an address by design:
// "unknown" or an obfuscated identifier ("_hidden"), with or without port.
func isObfuscated(node string) bool {
	host := node
	if i := strings.IndexByte(node, ':'); i >= 0 && !strings.HasPrefix(node, "[") {
		if strings.IndexByte(node[i+1:], ':') < 0 { // not a bare IPv6 address
			host = node[:i]
		}
	}
	return strings.HasPrefix(host, "_") || strings.EqualFold(host, "unknown")
}

// parseIP parses an address as it appears in RemoteAddr and forwarding
// headers: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:8080", "fe80::1%eth0". obfPort also accepts an RFC 7239
// obfuscated port ("_p1"). The result is unmapped and has no zone.
func parseIP(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfPort)) {
			return netip.Addr{}, false
		}
		a, ok := parseAddr(s[1:end])
		if !ok || !a.Is6() { // brackets belong to IPv6 only
			return netip.Addr{}, false
		}
		return a.Unmap(), true
	}
	// The number of colons tells the forms apart before netip is asked:
	// a failed netip parse allocates its error, and "192.0.2.1:1234" is
	// the common case.
	switch i := strings.IndexByte(s, ':'); {
	case i < 0 || strings.IndexByte(s[i+1:], ':') >= 0: // bare IPv4 or IPv6
		a, ok := parseAddr(s)
		return a.Unmap(), ok
	case !validPort(s[i+1:], obfPort):
		return netip.Addr{}, false
	default: // IPv4 and port: an unbracketed IPv6 address cannot carry one
		a, ok := parseAddr(s[:i])
		return a, ok && a.Is4()
	}
}

// parseAddr parses a bare address, dropping its zone. The zone is cut off
// before netip sees it: netip interns zones, and an attacker's zones need
// not be kept.
func parseAddr(s string) (netip.Addr, bool) {
	host, zone, hasZone := strings.Cut(s, "%")
	if hasZone && zone == "" {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(host)
	if err != nil || (hasZone && !a.Is6()) {
		return netip.Addr{}, false
	}
	return a, true
}

// validPort reports a decimal port 0..65535, or with obf an obfuscated
// port: "_" followed by letters, digits, ".", "_" or "-" (RFC 7239 §6.3).
func validPort(p string, obf bool) bool {
	if obf && len(p) > 1 && p[0] == '_' {
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

func isAlnum(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// validHeaderName reports whether name is an HTTP token (RFC 9110 §5.1).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isAlnum(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// trimOWS trims the optional white space of HTTP (spaces and tabs).
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// clip shortens attacker-controlled text quoted in an error, so that a
// huge header cannot make a huge log line.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// KeyByHeader returns a KeyFunc that keys a request by the value of the
// header name: its first line, as Header.Get reads it, trimmed of white
// space. A missing or empty header yields ErrNoKey. An empty or invalid
// name makes every call fail with ErrInvalidOption.
func KeyByHeader(name string) KeyFunc {
	if !validHeaderName(name) {
		return invalidKeyFunc(fmt.Sprintf("KeyByHeader: header name %q is not an HTTP token", name))
	}
	key := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		if v := r.Header[key]; len(v) > 0 {
			if s := trimOWS(v[0]); s != "" {
				return s, nil
			}
		}
		return "", fmt.Errorf("%w: header %s is missing or empty", ErrNoKey, key)
	}
}

// KeyByQuery returns a KeyFunc that keys a request by the first value of
// the URL query parameter param, decoded exactly as URL.Query().Get would
// decode it (malformed pairs are skipped), without parsing the rest of the
// query. A missing or empty parameter yields ErrNoKey. An empty param
// makes every call fail with ErrInvalidOption.
func KeyByQuery(param string) KeyFunc {
	if param == "" {
		return invalidKeyFunc("KeyByQuery: empty parameter name")
	}
	return func(r *http.Request) (string, error) {
		if r.URL != nil {
			if v, ok := queryValue(r.URL.RawQuery, param); ok && v != "" {
				return v, nil
			}
		}
		return "", fmt.Errorf("%w: query parameter %q is missing or empty", ErrNoKey, param)
	}
}

// queryValue finds the first value of param in a raw query by the rules of
// url.ParseQuery.
func queryValue(q, param string) (string, bool) {
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k)
		if err != nil || k != param {
			continue
		}
		if v, err = url.QueryUnescape(v); err != nil {
			continue
		}
		return v, true
	}
	return "", false
}

// KeyByForm returns a KeyFunc that keys a request by the first value of
// the field of a URL-encoded form body (application/x-www-form-urlencoded
// on POST, PUT or PATCH, as Request.PostFormValue sees it; the URL query is
// not consulted: use KeyByQuery). At most MaxFormBytes are read, and the
// body is handed on intact: the handler can still read or parse it. A
// request without such a body, or without the field, yields ErrNoKey; a
// larger or unreadable body, ErrInvalidBody. An empty field name makes
// every call fail with ErrInvalidOption.
func KeyByForm(field string) KeyFunc {
	if field == "" {
		return invalidKeyFunc("KeyByForm: empty field name")
	}
	return func(r *http.Request) (string, error) {
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch:
		default:
			return "", fmt.Errorf("%w: %s request has no form body", ErrNoKey, r.Method)
		}
		mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
		if !strings.EqualFold(trimOWS(mt), "application/x-www-form-urlencoded") {
			return "", fmt.Errorf("%w: body is not a URL-encoded form", ErrNoKey)
		}
		body, err := peekBody(r, MaxFormBytes)
		if err != nil {
			return "", err
		}
		// Like ParseForm, keep the pairs that decode even if others do not.
		vals, _ := url.ParseQuery(string(body))
		if v := vals.Get(field); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: form field %q is missing or empty", ErrNoKey, field)
	}
}

// KeyByJSONField returns a KeyFunc that keys a request by the string value
// of the top-level field of its JSON object body, reading at most maxBytes.
// The body is handed on intact: r.Body is replaced by one that yields the
// bytes read followed by the unread rest, and closes the original.
//
// The field name matches case-insensitively and must occur at most once,
// because encoding/json fills a struct field from any case variant, the
// last one winning: a body such as {"nickname":"x1","NICKNAME":"abc7"}
// would otherwise be keyed by one value and handled with another. A field
// that is missing, null, empty or not a string, or an empty body, yields
// ErrNoKey; a body larger than maxBytes, not a single JSON object, or with
// the field repeated, yields ErrInvalidBody. An empty field or a
// non-positive maxBytes makes every call fail with ErrInvalidOption.
func KeyByJSONField(field string, maxBytes int64) KeyFunc {
	switch {
	case field == "":
		return invalidKeyFunc("KeyByJSONField: empty field name")
	case maxBytes <= 0:
		return invalidKeyFunc(fmt.Sprintf("KeyByJSONField: maxBytes %d must be positive", maxBytes))
	}
	return func(r *http.Request) (string, error) {
		body, err := peekBody(r, maxBytes)
		if err != nil {
			return "", err
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return "", fmt.Errorf("%w: empty body", ErrNoKey)
		}
		return jsonStringField(body, field)
	}
}

// jsonStringField returns the string value of the top-level field of the
// JSON object in body.
func jsonStringField(body []byte, field string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", fmt.Errorf("%w: body is not a JSON object", ErrInvalidBody)
	}
	var val json.RawMessage
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("%w: invalid JSON: %v", ErrInvalidBody, err)
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return "", fmt.Errorf("%w: invalid JSON: %v", ErrInvalidBody, err)
		}
		if !strings.EqualFold(name, field) {
			continue
		}
		if found {
			return "", fmt.Errorf("%w: JSON field %q given more than once", ErrInvalidBody, field)
		}
		val, found = raw, true
	}
	if _, err := dec.Token(); err != nil {
		return "", fmt.Errorf("%w: invalid JSON: %v", ErrInvalidBody, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("%w: data after the JSON object", ErrInvalidBody)
	}
	var s string
	if !found || json.Unmarshal(val, &s) != nil || s == "" {
		return "", fmt.Errorf("%w: JSON field %q is missing, empty or not a string", ErrNoKey, field)
	}
	return s, nil
}

// peekBody reads up to max bytes of r's body and puts them back in front
// of the unread rest, so the handler sees the body unchanged. More than
// max bytes, or a read error, is ErrInvalidBody; no body reads as empty.
func peekBody(r *http.Request, max int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	orig := r.Body
	buf, err := io.ReadAll(io.LimitReader(orig, max+1))
	r.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(buf), orig), Closer: orig}
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: reading the body: %v", ErrInvalidBody, err)
	case int64(len(buf)) > max:
		return nil, fmt.Errorf("%w: body larger than %d bytes", ErrInvalidBody, max)
	}
	return buf, nil
}

// replayBody is a request body that yields the bytes a key function read
// and then the rest of the original, which it closes.
type replayBody struct {
	io.Reader
	io.Closer
}

// KeyByRoutePattern returns a KeyFunc that keys a request by the ServeMux
// pattern that matched it (Request.Pattern, e.g. "GET /users/{id}"), not by
// its raw path, so /users/1 and /users/2 share one key and a client cannot
// mint keys by varying the path. The pattern is set only once the mux has
// routed the request: wrap the handlers registered on the mux, not the mux
// itself. An empty pattern yields ErrNoKey.
func KeyByRoutePattern() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", fmt.Errorf("%w: no route pattern (is the key function used outside the ServeMux?)", ErrNoKey)
		}
		return r.Pattern, nil
	}
}

// KeyByMethod returns a KeyFunc that keys a request by its method; an
// empty method is GET, as net/http defines it.
func KeyByMethod() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Method == "" {
			return http.MethodGet, nil
		}
		return r.Method, nil
	}
}

// JoinKeys returns a KeyFunc whose key combines the keys of fns, in order,
// for limits such as "per client per route". Each component is written as
// its length in decimal, a colon and the component itself ("4:POST" +
// "12:/auth/signup"), so no component can forge a boundary: two different
// lists of components never join to the same key. The first component
// error is returned, wrapped, so errors.Is(err, ErrNoKey) still works. No
// functions, or a nil one, makes every call fail with ErrInvalidOption.
func JoinKeys(fns ...KeyFunc) KeyFunc {
	if len(fns) == 0 {
		return invalidKeyFunc("JoinKeys: no key functions")
	}
	for i, fn := range fns {
		if fn == nil {
			return invalidKeyFunc(fmt.Sprintf("JoinKeys: key function %d is nil", i))
		}
	}
	fns = slices.Clone(fns)
	return func(r *http.Request) (string, error) {
		var buf [128]byte // most joined keys fit: the result is the only allocation
		b := buf[:0]
		for i, fn := range fns {
			k, err := fn(r)
			if err != nil {
				return "", fmt.Errorf("JoinKeys component %d: %w", i, err)
			}
			b = strconv.AppendInt(b, int64(len(k)), 10)
			b = append(b, ':')
			b = append(b, k...)
		}
		return string(b), nil
	}
}

// invalidKeyFunc is the KeyFunc of a misconfigured constructor whose
// signature has no error result: it fails every call, loudly, rather than
// limiting by a key that means nothing.
func invalidKeyFunc(msg string) KeyFunc {
	err := fmt.Errorf("%w: %s", ErrInvalidOption, msg)
	return func(*http.Request) (string, error) { return "", err }
}
