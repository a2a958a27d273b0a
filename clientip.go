package floodgate

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
)

// ErrNoClientIP reports a request whose client address cannot be parsed.
var ErrNoClientIP = errors.New("floodgate: no valid client IP")

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
	// trustUnix makes a unix-socket peer (RemoteAddr "@" or "") a
	// trusted proxy.
	trustUnix bool
	source    ipSource
	header    string // canonical header key read by the source
	hops      int    // sourceXFFHops
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
// Every address inside a trusted range can set any key: the forwarding
// header it sends is believed. Trust the proxies' own addresses where you
// can; PrivatePrefixes trusts every host of the internal network, so any
// of them, compromised, can pose as any client. Trusting every address
// would let every client choose its own key, which is no limit at all:
// a prefix of length 0 (0.0.0.0/0, ::/0, or ::ffff:0:0/96, which is all
// of IPv4) is an error wrapping ErrInvalidOption, and so is a list, over
// all TrustProxies options, whose prefixes together cover every public
// IPv4 address (0.0.0.0/1 and 128.0.0.0/1, say, or the unicast /8s;
// private, loopback, documentation and multicast ranges left out do not
// count), every global IPv6 address (2000::/3) or the IPv4-mapped block.
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
			given := p
			p = unmapPrefix(p)
			if p.Bits() == 0 {
				return fmt.Errorf("%w: trusted proxy prefix %v is every address: any client could set its own key through a forwarding header; name the proxies' addresses", ErrInvalidOption, given)
			}
			c.trusted = append(c.trusted, p.Masked())
		}
		return nil
	}
}

// TrustUnixSocket makes a peer connected over a unix socket a trusted
// proxy, for a reverse proxy on the same host that reaches the server
// through one: net/http gives such a peer the RemoteAddr "@" or "", which
// is no address. Its forwarding header is read under the configured
// source (FromXForwardedFor, FromXForwardedForHops, FromHeader or
// FromForwarded, one of which is required); since the peer has no address
// of its own, a request without that header is an error wrapping
// ErrNoClientIP rather than a key shared by every such request. It may be
// combined with TrustProxies. Without it, a unix-socket peer is an error
// wrapping ErrNoClientIP whose message names this option.
func TrustUnixSocket() IPOption {
	return func(c *ipConfig) error {
		c.trustUnix = true
		return nil
	}
}

// unmapPrefix converts an IPv4-mapped IPv6 prefix to IPv4, since client
// addresses are unmapped before they are matched.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
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
// between its addresses at will). bits must be in 16..128. It does not
// apply to transition addresses (NAT64, IPv4-compatible, 6to4, Teredo),
// which are keyed by the IPv4 address they carry under WithIPv4Prefix:
// see KeyByIP.
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
// netip.Addr.IsPrivate, for proxies inside a private network. Trusting
// them trusts every internal host to tell who the client is (see
// TrustProxies). The slice is new on every call.
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
// grouped by their /64 unless WithIPv6Prefix says otherwise.
//
// An IPv6 transition address is keyed by the IPv4 address it carries,
// grouped by WithIPv4Prefix like any IPv4 client: NAT64 64:ff9b::/96 and
// 64:ff9b:1::/48 (the IPv4 address in the last 32 bits), IPv4-compatible
// ::a.b.c.d (not :: or ::1), 6to4 2002:AABB:CCDD::/48 (bits 16-47) and
// Teredo 2001::/32 (the last 32 bits inverted). Otherwise every IPv4
// client behind a NAT64 gateway, or of one Teredo server, would share one
// /64, and one 6to4 site could mint 65,536 keys. A 64:ff9b:1::/48 address
// in a layout shorter than /96 (the IPv4 address elsewhere, its last 24
// bits zero) is keyed by the whole address, one key per client. Trusted
// proxies are matched against the address as it is, not the IPv4 address
// it carries.
//
// A request whose address cannot be determined gets an error wrapping
// ErrNoClientIP, never a shared key. The work per request is bounded (see
// MaxForwardedEntries) and, on success, allocates only the key; a
// dotted-quad client under the default /32 allocates nothing, its key
// being the text it was written in (a substring of RemoteAddr or of the
// header, as KeyByHeader's keys are).
func KeyByIP(opts ...IPOption) (KeyFunc, error) {
	c, err := newIPConfig(opts)
	if err != nil {
		return nil, err
	}
	return func(r *http.Request) (string, error) {
		a, text, err := c.clientAddr(r)
		if err != nil {
			return "", err
		}
		if text != "" && c.v4Bits == 32 {
			return text, nil // already canonical: no formatting, no allocation
		}
		return c.key(a), nil
	}, nil
}

// ClientIP returns a function that resolves the client address of a
// request by the rules KeyByIP applies for the same options: the trusted
// proxies, the forwarding source, TrustUnixSocket. The address is the one
// KeyByIP would key by before grouping it by prefix: unmapped, without
// zone, and for an IPv6 transition address the IPv4 address it carries.
// Use it where a handler or a predicate needs the client, so that it
// agrees with the limit instead of reading X-Forwarded-For again (and
// believing it from anyone). An address that cannot be resolved is an
// error wrapping ErrNoClientIP; the options are checked as KeyByIP checks
// them.
func ClientIP(opts ...IPOption) (func(*http.Request) (netip.Addr, error), error) {
	c, err := newIPConfig(opts)
	if err != nil {
		return nil, err
	}
	return func(r *http.Request) (netip.Addr, error) {
		a, _, err := c.clientAddr(r)
		if err != nil {
			return netip.Addr{}, err
		}
		client, _ := clientOf(a)
		return client, nil
	}, nil
}

// IPResolver resolves the client of a call of any transport by the rules
// of KeyByIP and ClientIP, for the adapters of transports other than
// net/http (contrib/grpclimit, contrib/connectlimit): the adapter hands it
// the call's peer and the lines of the forwarding header the options name
// (Header), read from its own metadata, and gets the key KeyByIP would
// give an HTTP request with that RemoteAddr and header. An IPResolver is
// immutable and safe for concurrent use.
type IPResolver struct{ c *ipConfig }

// NewIPResolver returns a resolver for opts, checked as KeyByIP checks
// them: an error wrapping ErrInvalidOption for a forwarding source
// without trusted proxies, or the reverse.
func NewIPResolver(opts ...IPOption) (*IPResolver, error) {
	c, err := newIPConfig(opts)
	if err != nil {
		return nil, err
	}
	return &IPResolver{c: c}, nil
}

// Header returns the name, in canonical form, of the forwarding header
// the resolver believes from a trusted peer ("X-Forwarded-For",
// "Forwarded", FromHeader's name), or "" when it reads none, the peer
// alone being the client.
func (r *IPResolver) Header() string {
	if r.c.source == sourcePeer {
		return ""
	}
	return r.c.header
}

// Key returns the key of a call from peer, written as
// http.Request.RemoteAddr is ("192.0.2.1:5000", "[2001:db8::1]:5000", a
// bare address; "@" or "" for a unix socket), whose forwarding header
// (Header) has the lines forwarded: what KeyByIP returns for such an HTTP
// request. forwarded is read only when peer is a trusted proxy. An
// address that cannot be resolved is an error wrapping ErrNoClientIP. It
// allocates only the key, and nothing for a dotted-quad client under the
// default /32, whose key is a substring of peer or of forwarded.
func (r *IPResolver) Key(peer string, forwarded []string) (string, error) {
	a, text, err := r.c.resolve(peer, forwarded)
	if err != nil {
		return "", err
	}
	if text != "" && r.c.v4Bits == 32 {
		return text, nil
	}
	return r.c.key(a), nil
}

// Addr returns the client address of a call, as ClientIP does for an
// HTTP request: peer and forwarded as for Key.
func (r *IPResolver) Addr(peer string, forwarded []string) (netip.Addr, error) {
	a, _, err := r.c.resolve(peer, forwarded)
	if err != nil {
		return netip.Addr{}, err
	}
	client, _ := clientOf(a)
	return client, nil
}

// SkipClients returns a predicate for WithSkip that exempts the clients
// whose address, resolved as ClientIP resolves it with opts, lies in one
// of prefixes: monitoring probes, an office range. Give it the options of
// the key function, so that the exemption trusts exactly the proxies the
// limit trusts. A client whose address cannot be resolved is not exempt:
// it is limited, and its key function reports the error. IPv4-mapped
// prefixes are converted to IPv4; a transition address is matched by the
// IPv4 address it carries. An empty list, an invalid prefix, or a list
// that would exempt everyone (a prefix of length 0, or prefixes that
// together cover every client, as TrustProxies refuses them) is an error
// wrapping ErrInvalidOption.
func SkipClients(prefixes []netip.Prefix, opts ...IPOption) (func(*http.Request) bool, error) {
	if len(prefixes) == 0 {
		return nil, fmt.Errorf("%w: SkipClients needs at least one prefix", ErrInvalidOption)
	}
	exempt := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			return nil, fmt.Errorf("%w: invalid exempt prefix %v", ErrInvalidOption, p)
		}
		given := p
		p = unmapPrefix(p)
		if p.Bits() == 0 {
			return nil, fmt.Errorf("%w: exempt prefix %v is every address: it would disable the limit", ErrInvalidOption, given)
		}
		exempt = append(exempt, p.Masked())
	}
	if space, all := everyoneIn(exempt); all {
		return nil, fmt.Errorf("%w: the exempt prefixes together cover %s: it would disable the limit; name the clients to exempt", ErrInvalidOption, space)
	}
	client, err := ClientIP(opts...)
	if err != nil {
		return nil, err
	}
	return func(r *http.Request) bool {
		a, err := client(r)
		if err != nil {
			return false
		}
		for _, p := range exempt {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}, nil
}

// newIPConfig applies opts to the defaults and checks that they make a
// configuration.
func newIPConfig(opts []IPOption) (*ipConfig, error) {
	c := &ipConfig{v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil IP option", ErrInvalidOption)
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if space, all := everyoneIn(c.trusted); all {
		return nil, fmt.Errorf("%w: the trusted proxy prefixes together cover %s: any client could set its own key through a forwarding header; name the proxies' addresses", ErrInvalidOption, space)
	}
	trusts := len(c.trusted) > 0 || c.trustUnix
	switch {
	case c.source != sourcePeer && !trusts:
		return nil, fmt.Errorf("%w: a forwarding header source needs TrustProxies or TrustUnixSocket: believing it from any peer lets every client choose its key", ErrInvalidOption)
	case c.source == sourcePeer && trusts:
		return nil, fmt.Errorf("%w: TrustProxies or TrustUnixSocket without a forwarding header source (FromXForwardedFor, FromXForwardedForHops, FromHeader, FromForwarded) would key every proxied client by the proxy", ErrInvalidOption)
	}
	return c, nil
}

// ipText is a client address and, when it was written as a dotted quad,
// that text. netip accepts only canonical dotted quads (four decimal
// fields, no leading zeros), so the text is then the address's canonical
// form: the /32 key as it is, with nothing to format or allocate.
type ipText struct {
	addr netip.Addr
	text string // canonical IPv4 text of addr, or ""
}

// clientAddr resolves the client address of r, unmapped and without
// zone, and its text if it was written as a dotted quad (see ipText). The
// results are separate values, not an ipText, so that they stay in
// registers on the hot path. The forwarding header is looked up only for
// a trusted peer.
func (c *ipConfig) clientAddr(r *http.Request) (netip.Addr, string, error) {
	peer, text, ok := parseIP(r.RemoteAddr, false)
	if ok && (c.source == sourcePeer || !c.isTrusted(peer)) {
		return peer, text, nil
	}
	// Indexing the map with the pre-canonicalized key avoids
	// Header.Values' per-call canonicalization.
	return c.viaProxy(r.RemoteAddr, ipText{peer, text}, ok, r.Header[c.header])
}

// resolve is clientAddr for a call of any transport: remote is its peer
// as RemoteAddr writes it, lines its forwarding header's lines.
func (c *ipConfig) resolve(remote string, lines []string) (netip.Addr, string, error) {
	peer, text, ok := parseIP(remote, false)
	if ok && (c.source == sourcePeer || !c.isTrusted(peer)) {
		return peer, text, nil
	}
	return c.viaProxy(remote, ipText{peer, text}, ok, lines)
}

// viaProxy resolves the client of a peer that is not a plain untrusted
// address: a trusted proxy (ok), a unix socket, or garbage.
func (c *ipConfig) viaProxy(remote string, peer ipText, ok bool, lines []string) (netip.Addr, string, error) {
	switch {
	case ok:
	case remote != "@" && remote != "":
		return netip.Addr{}, "", fmt.Errorf("%w: peer address %q", ErrNoClientIP, clip(remote))
	case !c.trustUnix:
		return netip.Addr{}, "", fmt.Errorf("%w: peer address %q is a unix-socket peer; behind a proxy on a unix socket, use TrustUnixSocket with the header it sets", ErrNoClientIP, remote)
	}
	// The peer is a trusted proxy. A unix-socket peer leaves peer invalid:
	// it has no address to fall back on.
	a, err := c.forwardedAddr(lines, peer)
	if err == nil && !a.addr.IsValid() {
		return netip.Addr{}, "", fmt.Errorf("%w: the unix-socket peer sent no %s", ErrNoClientIP, c.header)
	}
	return a.addr, a.text, err
}

// forwardedAddr reads the client address from the forwarding header of a
// trusted peer; peer is the answer when the header names no client.
func (c *ipConfig) forwardedAddr(lines []string, peer ipText) (ipText, error) {
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

// key formats addr aggregated to the configured prefix. It formats into a
// stack buffer so that the key string is the only allocation.
func (c *ipConfig) key(addr netip.Addr) string {
	addr, whole := clientOf(addr)
	bits := c.v6Bits
	switch {
	case addr.Is4():
		bits = c.v4Bits
	case whole:
		bits = 128
	}
	var buf [len("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128")]byte
	if bits == addr.BitLen() {
		return string(addr.AppendTo(buf[:0]))
	}
	p, _ := addr.Prefix(bits) // bits is validated: cannot fail
	return string(p.AppendTo(buf[:0]))
}

// clientOf returns the address a client is keyed by: for an IPv6
// transition address, the IPv4 address it carries, since the IPv6 prefix
// of such an address belongs to a gateway or a tunnel, not to the client:
//
//   - NAT64, well-known prefix 64:ff9b::/96 (RFC 6052): the last 32 bits.
//   - NAT64, local-use prefix 64:ff9b:1::/48 (RFC 8215): the operator may
//     place any RFC 6052 layout from /48 to /96 in it, and only the /96
//     layout puts IPv4 bits into the last 24, where the others keep their
//     zero suffix (RFC 6052 §2.2). With one of those bits set the IPv4
//     address is the last 32 bits; otherwise the layout cannot be told
//     from the address, and whole is true: the client is keyed by its
//     whole address, which the translator derives from the IPv4 address
//     alone, so two clients never share a key and one cannot mint more.
//     An address with the u-octet (bits 64-71) set is not RFC 6052's and
//     is ordinary IPv6.
//   - IPv4-compatible ::a.b.c.d (RFC 4291, deprecated), except :: and ::1.
//   - 6to4 2002:AABB:CCDD::/48 (RFC 3056): bits 16-47, so one IPv4 site
//     cannot mint a key per /64 of its 2^16.
//   - Teredo 2001::/32 (RFC 4380): the client's public address, the last
//     32 bits inverted, so the clients of one Teredo server do not share
//     its /64.
//
// Any other address is returned as it is.
func clientOf(a netip.Addr) (client netip.Addr, whole bool) {
	if !a.Is6() {
		return a, false
	}
	b := a.As16()
	last := [4]byte{b[12], b[13], b[14], b[15]}
	hi := uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
	switch {
	case hi == 0x0064_ff9b_0000_0000 && b[8]|b[9]|b[10]|b[11] == 0: // 64:ff9b::/96
		return netip.AddrFrom4(last), false
	case hi>>16 == 0x0064_ff9b_0001 && b[8] == 0: // 64:ff9b:1::/48
		if b[13]|b[14]|b[15] != 0 {
			return netip.AddrFrom4(last), false
		}
		return a, true
	case hi == 0 && b[8]|b[9]|b[10]|b[11] == 0: // ::/96
		if b[12]|b[13]|b[14] == 0 && b[15] <= 1 { // :: and ::1
			return a, false
		}
		return netip.AddrFrom4(last), false
	case hi>>48 == 0x2002: // 6to4
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), false
	case hi>>32 == 0x2001_0000: // Teredo
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), false
	}
	return a, false
}

// parseIP parses an address as it appears in RemoteAddr and forwarding
// headers: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:8080", "fe80::1%eth0". obfPort also accepts an RFC 7239
// obfuscated port ("_p1"). The address is unmapped and has no zone; an
// IPv4 address written as a dotted quad comes with that text.
//
// The common form, a canonical dotted quad with or without a decimal
// port (what net/http writes for every IPv4 peer), is read in one pass
// by parseDotted; any other string, or a dotted quad netip would refuse,
// goes to parseIPForms, which parseDotted only ever agrees with
// (FuzzParseIPFastPath holds them to that).
func parseIP(s string, obfPort bool) (addr netip.Addr, text string, ok bool) {
	if ip, host, ok := parseDotted(s); ok {
		return netip.AddrFrom4(ip), host, true
	}
	return parseIPForms(s, obfPort)
}

// parseDotted reads "a.b.c.d" or "a.b.c.d:port" as netip.ParseAddr and
// validPort would, in one pass instead of the four scans and two parses
// of parseIPForms: four decimal fields of one to three digits, at most
// 255, without a leading zero, then optionally ':' and one to five
// digits, at most 65535. It returns the address and its text (s without
// the port), or false for anything else, which it leaves to
// parseIPForms to accept or refuse: false means only "not this form".
func parseDotted(s string) (ip [4]byte, host string, ok bool) {
	i := 0
	for f := range 4 {
		if f > 0 {
			if i == len(s) || s[i] != '.' {
				return ip, "", false
			}
			i++
		}
		if i == len(s) || s[i]-'0' > 9 {
			return ip, "", false
		}
		n := uint(s[i] - '0')
		i++
		// A field that starts with 0 is "0": a digit after it is a
		// leading zero, which the next check refuses as no '.' or ':'.
		for k := 0; n != 0 && k < 2 && i < len(s) && s[i]-'0' <= 9; k++ {
			n = n*10 + uint(s[i]-'0')
			i++
		}
		if n > 255 {
			return ip, "", false
		}
		ip[f] = byte(n)
	}
	host = s[:i]
	if i == len(s) {
		return ip, host, true
	}
	port := s[i+1:]
	if s[i] != ':' || port == "" || len(port) > 5 {
		return ip, "", false
	}
	n := uint(0)
	for j := 0; j < len(port); j++ {
		if port[j]-'0' > 9 {
			return ip, "", false
		}
		n = n*10 + uint(port[j]-'0')
	}
	if n > 65535 {
		return ip, "", false
	}
	return ip, host, true
}

// parseIPForms is parseIP for every form it accepts.
func parseIPForms(s string, obfPort bool) (addr netip.Addr, text string, ok bool) {
	if s == "" {
		return netip.Addr{}, "", false
	}
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, "", false
		}
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !validPort(rest[1:], obfPort)) {
			return netip.Addr{}, "", false
		}
		a, ok := parseAddr(s[1:end])
		if !ok || !a.Is6() { // brackets belong to IPv6 only
			return netip.Addr{}, "", false
		}
		return a.Unmap(), "", true
	}
	// The number of colons tells the forms apart before netip is asked:
	// a failed netip parse allocates its error, and "192.0.2.1:1234" is
	// the common case.
	host := s
	switch i := strings.IndexByte(s, ':'); {
	case i < 0: // bare IPv4
	case strings.IndexByte(s[i+1:], ':') >= 0: // bare IPv6
		a, ok := parseAddr(s)
		return a.Unmap(), "", ok
	case !validPort(s[i+1:], obfPort):
		return netip.Addr{}, "", false
	default: // IPv4 and port: an unbracketed IPv6 address cannot carry one
		host = s[:i]
	}
	a, ok := parseAddr(host)
	if !ok || !a.Is4() {
		return netip.Addr{}, "", false
	}
	return a, host, true
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
