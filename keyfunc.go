package floodgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
)

// KeyFunc returns the key a request is limited by. An error means no key
// could be formed, and the request is refused under every error policy
// (fail-open forgives only the limiter's failures; see ErrorStatus for
// the status of each error), so a malformed request never silently
// shares an "unknown" bucket, nor passes uncounted.
//
// The constructors whose arguments can be invalid (KeyByIP, KeyByHeader,
// KeyByQuery, KeyByForm, KeyByJSONField, JoinKeys, KeyByPattern) return
// an error for them, wrapping ErrInvalidOption, that names the
// constructor and the fix, and a nil KeyFunc: one whose error was ignored
// is refused in turn by WithKeyFunc, NewPolicySelector, JoinKeys and
// KeyByPattern, at construction. Those without arguments (KeyByMethod,
// KeyByRoutePattern) cannot be built wrong and return a KeyFunc alone.
type KeyFunc func(r *http.Request) (string, error)

// ErrNoKey reports a request that does not carry what a key function needs:
// a missing or empty header, query parameter, form or JSON field, route
// pattern, or a value from which no pattern can be formed. A
// PolicySelector treats it as "this policy does not apply" and tries the
// next one; every other key error stops the request.
var ErrNoKey = errors.New("floodgate: request carries no key")

// ErrAmbiguousKey reports a request that gives its key more than one
// value: a form field in both the URL query and the body with different
// values, a field or query parameter repeated with different values, a
// header given on several lines that differ. A handler could then act on
// another value than the one the limit counts (FormValue prefers the
// query to a multipart body, PostFormValue reads only the body, a loop
// over Request.Form sees every value), so the request is refused:
// ErrorStatus answers it 400 under every error policy. It does not wrap
// ErrNoKey, so a PolicySelector never falls back to a weaker limit for
// it.
var ErrAmbiguousKey = errors.New("floodgate: request gives its key more than one value")

// ErrInvalidBody reports a request body a key function could not use: too
// large for its bound, not the JSON it expects, or failing to read. It does
// not wrap ErrNoKey, so a PolicySelector does not fall back to a weaker
// limit for a body the handler might still accept.
var ErrInvalidBody = errors.New("floodgate: request body cannot be read for a key")

// KeyByHeader returns a KeyFunc that keys a request by the value of the
// header name, trimmed of white space, as Header.Get reads it. A header
// given on several lines must give the same value on each: lines that
// differ (an empty one included) yield ErrAmbiguousKey, since a handler
// or a proxy that reads another line than the first would act on another
// value than the one counted. A missing or empty header yields ErrNoKey.
// An empty name, or one that is not an HTTP token, is an error wrapping
// ErrInvalidOption.
func KeyByHeader(name string) (KeyFunc, error) {
	if !validHeaderName(name) {
		return nil, keyArgError("KeyByHeader", "header name %q is not an HTTP token: pass a header name such as \"X-API-Key\"", name)
	}
	key := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		lines := r.Header[key]
		if len(lines) == 0 {
			return "", fmt.Errorf("%w: header %s is missing", ErrNoKey, key)
		}
		v := trimOWS(lines[0])
		for _, l := range lines[1:] {
			if trimOWS(l) != v {
				return "", fmt.Errorf("%w: header %s is given on %d lines that differ", ErrAmbiguousKey, key, len(lines))
			}
		}
		if v == "" {
			return "", fmt.Errorf("%w: header %s is empty", ErrNoKey, key)
		}
		return v, nil
	}, nil
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
// non-positive maxBytes is an error wrapping ErrInvalidOption.
func KeyByJSONField(field string, maxBytes int64) (KeyFunc, error) {
	switch {
	case field == "":
		return nil, keyArgError("KeyByJSONField", "empty field name: pass the name of the top-level JSON field to key by, such as \"nickname\"")
	case maxBytes <= 0:
		return nil, keyArgError("KeyByJSONField", "maxBytes %d must be positive: pass the largest body the handler accepts, such as 4<<10", maxBytes)
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
	}, nil
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
	buf, whole, err := peek(r, max)
	if err == nil && !whole {
		return nil, fmt.Errorf("%w: body larger than %d bytes", ErrInvalidBody, max)
	}
	return buf, err
}

// peek reads the first max bytes of r's body, or all of it if shorter
// (whole), and puts them back in front of the unread rest. A read error
// is ErrInvalidBody; no body reads as empty.
func peek(r *http.Request, max int64) (buf []byte, whole bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true, nil
	}
	orig := r.Body
	buf, err = io.ReadAll(io.LimitReader(orig, max+1))
	r.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(buf), orig), Closer: orig}
	if err != nil {
		return nil, false, fmt.Errorf("%w: reading the body: %v", ErrInvalidBody, err)
	}
	if int64(len(buf)) > max {
		return buf[:max], false, nil
	}
	return buf, true, nil
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
// itself. A request without a pattern got to the key function outside
// the mux's match, which no request can cause on its own: the error wraps
// ErrInvalidOption (not ErrNoKey, so a PolicySelector does not fall back
// to a weaker limit for every request) and says how to fix it.
func KeyByRoutePattern() KeyFunc {
	return func(r *http.Request) (string, error) {
		if r.Pattern == "" {
			return "", errNoRoutePattern
		}
		return r.Pattern, nil
	}
}

var errNoRoutePattern = fmt.Errorf("%w: KeyByRoutePattern found no route pattern: the limiter runs outside the ServeMux's match; wrap the handlers registered on the ServeMux, not the mux (mux.Handle(pattern, mw(handler)))", ErrInvalidOption)

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
// functions, or a nil one (what a constructor returns with its error), is
// an error wrapping ErrInvalidOption.
func JoinKeys(fns ...KeyFunc) (KeyFunc, error) {
	if len(fns) == 0 {
		return nil, keyArgError("JoinKeys", "no key functions: pass the key functions whose keys to combine")
	}
	for i, fn := range fns {
		if fn == nil {
			return nil, keyArgError("JoinKeys", "key function %d is nil: check the error of the constructor that built it", i)
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
	}, nil
}

// keyArgError is the error of a key function constructor given an
// invalid argument: it names the constructor, the argument and the fix.
func keyArgError(constructor, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidOption, constructor, fmt.Sprintf(format, args...))
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
