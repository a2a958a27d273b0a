package floodgate

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
)

// KeyFunc returns the key a request is limited by. An error means no key
// could be formed; the middleware's error policy then decides the answer,
// so a malformed request never silently shares an "unknown" bucket.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoClientIP reports a request whose client address cannot be parsed.
var ErrNoClientIP = errors.New("floodgate: no valid client IP")

// IPOption configures KeyByIP.
type IPOption func(*ipConfig) error

type ipConfig struct {
	v4Bits int
	v6Bits int
}

// KeyByIP returns a KeyFunc that keys a request by its client IP address.
//
// Without options it uses the TCP peer (Request.RemoteAddr) only: no
// forwarding header is believed, so a client cannot choose its own key.
// IPv4-mapped IPv6 addresses are unmapped, zones and ports dropped, and
// IPv6 clients are grouped by their /64 (a single host usually controls a
// whole /64).
func KeyByIP(opts ...IPOption) (KeyFunc, error) {
	c := ipConfig{v4Bits: 32, v6Bits: 64}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil IP option", ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	return func(r *http.Request) (string, error) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil {
			return "", fmt.Errorf("%w: RemoteAddr %q: %v", ErrNoClientIP, r.RemoteAddr, err)
		}
		return c.key(ap.Addr()), nil
	}, nil
}

// key formats addr aggregated to the configured prefix.
func (c *ipConfig) key(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	bits := c.v6Bits
	if addr.Is4() {
		bits = c.v4Bits
	}
	if bits == addr.BitLen() {
		return addr.String()
	}
	p, _ := addr.Prefix(bits) // bits is validated: cannot fail
	return p.String()
}
