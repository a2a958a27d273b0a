package floodgate

import (
	"net/http"
	"strings"
)

// A CORS preflight is an OPTIONS request that a browser sends on its own,
// before a cross-origin request that is not "simple", to ask whether the
// real request may be sent. Counting it would charge the user twice per
// real request; letting it through uncounted lets anyone reach a handler
// that answers OPTIONS as it answers GET by dressing requests as
// preflights. So the middleware decides a preflight like any request —
// its cost reserved, which bounds how many are in flight, and a spent
// quota refused — and gives the cost back once the handler has answered
// it as a preflight succeeds in a browser: a 2xx with
// Access-Control-Allow-Origin and no body. Anything else the handler
// made of it stays counted (WithLimitPreflights: every preflight does).
//
// Only a request in a browser's exact preflight shape is one: OPTIONS,
// an Origin that is a serialized origin, one Access-Control-Request-Method
// that is a method token, no body, and no credentials (browsers never send
// Authorization or Cookie on a preflight). Whatever else is dressed as one
// is a request like any other.

// isPreflight reports whether r has a browser's CORS preflight shape.
func isPreflight(r *http.Request) bool {
	if r.Method != http.MethodOptions || r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return false
	}
	h := r.Header
	origin, method := h["Origin"], h["Access-Control-Request-Method"]
	return len(origin) == 1 && serializedOrigin(origin[0]) &&
		len(method) == 1 && isToken(method[0]) &&
		len(h["Authorization"]) == 0 && len(h["Cookie"]) == 0
}

// serializedOrigin reports whether s is an origin as a browser serializes
// it (RFC 6454 §6.2): "null", or a lower-case scheme, "://", and a
// lower-case host with an optional port — no path, query, user or
// trailing slash.
func serializedOrigin(s string) bool {
	if s == "null" {
		return true
	}
	scheme, host, ok := strings.Cut(s, "://")
	if !ok || scheme == "" || host == "" || scheme[0] < 'a' || scheme[0] > 'z' {
		return false
	}
	for i := 0; i < len(scheme); i++ {
		if c := scheme[i]; !lowerAlnum(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !lowerAlnum(c) && c != '-' && c != '.' && c != ':' && c != '[' && c != ']' {
			return false
		}
	}
	return host[0] != ':' && host[len(host)-1] != ':'
}

func lowerAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// isToken reports whether s is an HTTP token (RFC 9110 §5.6.2), as a
// method is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !lowerAlnum(c) && !('A' <= c && c <= 'Z') && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// preflightAnswer records, for a preflight, whether its answer is one a
// browser takes for a successful preflight: the status, whether
// Access-Control-Allow-Origin went out with it, and whether a body
// followed (or the connection was taken over).
type preflightAnswer struct {
	allowOrigin bool // Access-Control-Allow-Origin was in the header as sent
	body        bool // a body was written, or the connection hijacked
}

// answered reports whether the preflight was answered as one: a 2xx (the
// Fetch standard's "ok status"), allowing an origin, with no body.
func (a *preflightAnswer) answered(status int) bool {
	return status >= 200 && status < 300 && a.allowOrigin && !a.body
}

// committed notes the header as it goes out.
func (a *preflightAnswer) committed(h http.Header) {
	a.allowOrigin = len(h["Access-Control-Allow-Origin"]) > 0
}
