package floodgate

import (
	"fmt"
	"strings"
)

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

// walk implements FromXForwardedFor (forwarded false) and FromForwarded:
// right to left, skip trusted hops, return the first untrusted address.
func (c *ipConfig) walk(lines []string, peer ipText, forwarded bool) (ipText, error) {
	w := listWalker{lines: lines, quoted: forwarded}
	var last ipText // leftmost entry seen, every one of them trusted
	for {
		e, ok, err := w.next()
		if err != nil {
			return ipText{}, err
		}
		if !ok {
			break
		}
		var a ipText
		if forwarded {
			a, err = forwardedFor(e)
		} else {
			a, err = xffAddr(e)
		}
		if err != nil {
			return ipText{}, err
		}
		if !c.isTrusted(a.addr) {
			return a, nil
		}
		last = a
	}
	if last.addr.IsValid() {
		return last, nil
	}
	return peer, nil
}

// nthFromRight implements FromXForwardedForHops.
func (c *ipConfig) nthFromRight(lines []string, peer ipText) (ipText, error) {
	w := listWalker{lines: lines}
	var e string
	for n := 0; n < c.hops; n++ {
		next, ok, err := w.next()
		if err != nil {
			return ipText{}, err
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
func singleAddr(name string, lines []string, peer ipText) (ipText, error) {
	switch len(lines) {
	case 0:
		return peer, nil
	case 1:
	default:
		return ipText{}, fmt.Errorf("%w: %s given %d times", ErrNoClientIP, name, len(lines))
	}
	v := trimOWS(lines[0])
	if v == "" {
		return peer, nil
	}
	a, text, ok := parseIP(v, false)
	if !ok {
		return ipText{}, fmt.Errorf("%w: %s %q is not an IP address", ErrNoClientIP, name, clip(v))
	}
	return ipText{a, text}, nil
}

func xffAddr(e string) (ipText, error) {
	a, text, ok := parseIP(e, false)
	if !ok {
		return ipText{}, fmt.Errorf("%w: X-Forwarded-For entry %q is not an IP address", ErrNoClientIP, clip(e))
	}
	return ipText{a, text}, nil
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
func forwardedFor(elem string) (ipText, error) {
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
			return ipText{}, fmt.Errorf("%w: Forwarded element %q repeats for=", ErrNoClientIP, clip(elem))
		}
		value, found = trimOWS(v), true
	}
	if !found {
		return ipText{}, fmt.Errorf("%w: Forwarded element %q has no for=", ErrNoClientIP, clip(elem))
	}
	node, ok := unquote(value)
	if !ok {
		return ipText{}, fmt.Errorf("%w: Forwarded for=%s is malformed", ErrNoClientIP, clip(value))
	}
	if isObfuscated(node) {
		return ipText{}, fmt.Errorf("%w: Forwarded for=%s hides the client", ErrNoClientIP, clip(value))
	}
	a, text, ok := parseIP(node, true)
	if !ok {
		return ipText{}, fmt.Errorf("%w: Forwarded for=%s is not an IP address", ErrNoClientIP, clip(value))
	}
	return ipText{a, text}, nil
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
