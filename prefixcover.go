package floodgate

import (
	"net/netip"
	"slices"
)

// A list of trusted proxies (or of exempt clients) can hold every client
// without any one prefix being /0: 0.0.0.0/1 and 128.0.0.0/1 (the VPN
// trick for overriding a default route), 256 /8s, or the unicast /8s that
// leave out only addresses no client on the internet has. everyoneIn
// checks the union of the list against each space below.

// clientSpace is a space of addresses every client of one kind lies in,
// and the ranges of it that are not reachable from the internet (private,
// loopback, documentation, multicast, reserved: RFC 6890 and the IANA
// special-purpose registries), which do not make a list any less
// "everyone" by being left out of it.
type clientSpace struct {
	name     string
	space    netip.Prefix
	reserved []netip.Prefix
}

var clientSpaces = []clientSpace{
	{"every public IPv4 address", netip.MustParsePrefix("0.0.0.0/0"), mustPrefixes(
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
		"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
		"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	)},
	{"every global IPv6 address (2000::/3)", netip.MustParsePrefix("2000::/3"), mustPrefixes("2001:db8::/32")},
	{"every IPv6 address", netip.MustParsePrefix("::/0"), nil},
	{"the IPv4-mapped block ::ffff:0:0/96, which is all of IPv4", netip.MustParsePrefix("::ffff:0:0/96"), nil},
}

func mustPrefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// everyoneIn returns the name of a client space that the prefixes of
// list (masked, IPv4-mapped ones converted to IPv4) cover together, and
// false if they leave clients out of every one.
func everyoneIn(list []netip.Prefix) (string, bool) {
	for _, cs := range clientSpaces {
		if covers(append(slices.Clip(list), cs.reserved...), cs.space) {
			return cs.name, true
		}
	}
	return "", false
}

// covers reports whether the union of ps holds every address of target.
// Two prefixes are either nested or disjoint, so the parts of ps inside
// target, sorted by their first address, cover it when each starts no
// later than the address after the previous ones end.
func covers(ps []netip.Prefix, target netip.Prefix) bool {
	target = target.Masked()
	var inside []netip.Prefix
	for _, p := range ps {
		p = p.Masked()
		switch {
		case p.Bits() <= target.Bits() && p.Contains(target.Addr()):
			return true
		case p.Bits() > target.Bits() && target.Contains(p.Addr()):
			inside = append(inside, p)
		}
	}
	slices.SortFunc(inside, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	next, end := target.Addr(), lastAddr(target)
	for _, p := range inside {
		if next.Less(p.Addr()) {
			return false // a gap before p
		}
		last := lastAddr(p)
		if last == end {
			return true
		}
		if !last.Less(next) {
			next = last.Next()
		}
	}
	return false
}

// lastAddr returns the last address of the masked prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	hostBits := p.Addr().BitLen() - p.Bits()
	for i := 15; i >= 0 && hostBits > 0; i-- {
		n := min(hostBits, 8)
		b[i] |= byte(1<<n - 1)
		hostBits -= n
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}
