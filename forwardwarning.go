package floodgate

import (
	"log/slog"
	"net/http"
	"net/netip"
	"time"
)

// The most common misconfiguration of a limit keyed by client IP is a
// proxy whose forwarding headers the key function does not trust: every
// client behind it then shares the proxy's limit, silently. With a
// logger, the middleware looks for it on the request path.

// watchPeriod is how often the middleware looks, on the request path, at
// the forwarding headers the configuration warning needs: at most once a
// second, so the check costs nothing measurable.
const watchPeriod = time.Second

// checkForwarding warns when a private or loopback peer (a proxy, most
// likely) sends forwarding headers and the key is that peer's own
// address: the headers were not trusted, so every client behind the proxy
// shares its limit.
func (m *middleware) checkForwarding(r *http.Request, out *Outcome) {
	now := m.cfg.now().UnixNano()
	next := m.forwardCheck.Load()
	if now < next || !m.forwardCheck.CompareAndSwap(next, now+int64(watchPeriod)) {
		return
	}
	h := r.Header
	if len(h["X-Forwarded-For"]) == 0 && len(h["X-Real-Ip"]) == 0 && len(h["Forwarded"]) == 0 {
		return
	}
	peer, ok := peerAddr(r.RemoteAddr)
	if !ok || !(peer.IsPrivate() || peer.IsLoopback()) || !keyIsAddr(out.Call.Key, peer) {
		return
	}
	m.forwardCheck.Store(now + int64(configLogPeriod))
	m.cfg.logger.LogAttrs(r.Context(), slog.LevelWarn,
		"floodgate: a private or loopback peer sends forwarding headers that the key function does not trust, so every client behind it shares one limit; if it is your proxy, configure KeyByIP with TrustProxies and the header it sets",
		slog.String("policy", out.Call.Policy()),
		slog.String("peer", peer.String()),
		slog.String("key", out.Call.Key))
}

// peerAddr parses RemoteAddr, with or without a port.
func peerAddr(remote string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(remote); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// keyIsAddr reports whether key is peer's address, or the prefix KeyByIP
// groups it in.
func keyIsAddr(key string, peer netip.Addr) bool {
	if a, err := netip.ParseAddr(key); err == nil {
		return a.Unmap() == peer
	}
	if pfx, err := netip.ParsePrefix(key); err == nil {
		return pfx.Contains(peer)
	}
	return false
}
