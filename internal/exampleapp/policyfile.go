package exampleapp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/floodgate-go/floodgate"
)

// PolicyFile is the example server's policy file (-policies): the limits
// of the service as data, in JSON. Every field is described in
// docs/policy-file.md. A file is read by ParsePolicyFile, which refuses
// unknown fields and any value that could not be built.
type PolicyFile struct {
	// Headers is the quota header style of every policy that does not
	// set its own: "ietf" (the default), "legacy", "both" or "none".
	Headers string `json:"headers,omitempty"`
	// TrustedProxies are the CIDRs (or single addresses) of the reverse
	// proxies whose X-Forwarded-For is believed by every "ip" key and by
	// the bot check. Empty: the TCP peer is the client.
	TrustedProxies []string `json:"trustedProxies,omitempty"`
	// BotCheck, when set, puts a Cloudflare Turnstile check in front of
	// every policy on its routes; the secret comes from TURNSTILE_SECRET,
	// never from the file.
	BotCheck *BotCheckSpec `json:"botCheck,omitempty"`
	// Policies are the limits. A request is limited by every policy one
	// of whose routes it matches, in the order of the file (the first is
	// checked first), so that a ceiling listed first counts every attempt.
	Policies []PolicySpec `json:"policies"`
}

// BotCheckSpec is the policy file's bot check.
type BotCheckSpec struct {
	// Routes are the ServeMux patterns the check guards, e.g. "POST /signup".
	Routes []string `json:"routes"`
	// Hostnames are those of the pages that show the widget; a token
	// solved on another site is rejected. Required.
	Hostnames []string `json:"hostnames"`
	// Action, if set, is the widget's data-action: a token solved for
	// another form is rejected.
	Action string `json:"action,omitempty"`
}

// PolicySpec is one limit of the policy file: a named limiter, the
// requests it applies to and the key it counts them under.
type PolicySpec struct {
	// Name identifies the policy in the quota headers and across reloads:
	// a policy of the same name, algorithm, key and routes keeps its
	// limiter, and so every key's state. Unique, printable ASCII.
	Name string `json:"name"`
	// Routes are ServeMux patterns ("GET /auth/available/user_id",
	// "POST /signup", "/" for everything); at least one.
	Routes []string `json:"routes"`
	// Key is what a request is counted under.
	Key KeySpec `json:"key"`
	// Rate is the limit per key.
	Rate RateSpec `json:"rate"`
	// Fallback policies are tried in order when Key yields no key (a
	// nickname that forms no pattern, say): the first whose key applies
	// decides. They share the policy's routes, headers and denial.
	Fallback []FallbackSpec `json:"fallback,omitempty"`
	// Headers overrides the file's header style for this policy.
	Headers string `json:"headers,omitempty"`
	// DeniedBody, if set, is the JSON answered with 429 (as
	// application/json, with Retry-After), byte for byte: the service's
	// own envelope. Unset: RFC 9457 application/problem+json.
	DeniedBody json.RawMessage `json:"deniedBody,omitempty"`
}

// FallbackSpec is a policy tried when the one before it yields no key.
type FallbackSpec struct {
	Name string   `json:"name"`
	Key  KeySpec  `json:"key"`
	Rate RateSpec `json:"rate"`
}

// KeySpec says what a request is counted under: exactly one of IP,
// Header, Query, Form and JSON.
type KeySpec struct {
	// IP keys by the client IP (through the file's trusted proxies).
	IP *IPKeySpec `json:"ip,omitempty"`
	// Header keys by a request header's value.
	Header string `json:"header,omitempty"`
	// Query keys by a URL query parameter (refused when a form body
	// disagrees, see floodgate.KeyByQuery).
	Query string `json:"query,omitempty"`
	// Form keys by a form field, wherever the handler would read it.
	Form string `json:"form,omitempty"`
	// JSON keys by a top-level string field of a JSON object body.
	JSON string `json:"json,omitempty"`
	// MaxBytes bounds the JSON body read for a JSON key (default 4096).
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// Pattern keys by the value's pattern (abc1, abc2 → abc{NUM}), see
	// floodgate.KeyByPattern; not for IP keys.
	Pattern bool `json:"pattern,omitempty"`
}

// IPKeySpec is a client-IP key. IPv6 clients are grouped by IPv6Prefix
// bits (default 64; 48 for a per-network ceiling), IPv4 clients by
// IPv4Prefix bits (default 32).
type IPKeySpec struct {
	IPv6Prefix int `json:"ipv6Prefix,omitempty"`
	IPv4Prefix int `json:"ipv4Prefix,omitempty"`
}

// RateSpec is a policy's limit.
type RateSpec struct {
	// Limit is the number of events per Period; > 0.
	Limit int `json:"limit"`
	// Period is a Go duration ("10m", "1h", "24h"); > 0.
	Period Duration `json:"period"`
	// Burst is a token bucket's capacity (default Limit); only for
	// "token_bucket".
	Burst int `json:"burst,omitempty"`
	// Algorithm is "token_bucket", "sliding_log" (exact window) or
	// "sliding_counter" (approximate window, constant memory). Required.
	Algorithm string `json:"algorithm"`
}

// Duration is a time.Duration written in JSON as a Go duration string.
type Duration time.Duration

// UnmarshalJSON reads a duration string such as "10m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`must be a duration string such as "10m"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf(`%q is not a duration such as "10m" or "24h"`, s)
	}
	*d = Duration(v)
	return nil
}

// MaxPolicyFileBytes bounds the policy file read.
const MaxPolicyFileBytes = 1 << 20

// FieldError is an error in a policy file, at the JSON path Path
// (e.g. "policies[2].rate.limit"). It wraps floodgate.ErrInvalidRate for
// a rate and floodgate.ErrInvalidOption for everything else, and the
// error it was caused by, if any.
type FieldError struct {
	Path string
	Msg  string
	// Sentinel is floodgate.ErrInvalidRate or floodgate.ErrInvalidOption.
	Sentinel error
	// Err is the cause (a floodgate constructor's error), or nil.
	Err error
}

// Error returns "path: message".
func (e *FieldError) Error() string {
	msg := e.Msg
	if e.Err != nil {
		if msg != "" {
			msg += ": "
		}
		msg += e.Err.Error()
	}
	if e.Path == "" {
		return msg
	}
	return e.Path + ": " + msg
}

// Unwrap returns the sentinel and the cause.
func (e *FieldError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Sentinel}
	}
	return []error{e.Sentinel, e.Err}
}

func fieldErr(path, msg string) error {
	return &FieldError{Path: path, Msg: msg, Sentinel: floodgate.ErrInvalidOption}
}

func rateErr(path, msg string) error {
	return &FieldError{Path: path, Msg: msg, Sentinel: floodgate.ErrInvalidRate}
}

// causeErr names the field whose value a floodgate constructor refused.
func causeErr(path string, err error) error {
	s := floodgate.ErrInvalidOption
	if errors.Is(err, floodgate.ErrInvalidRate) {
		s = floodgate.ErrInvalidRate
	}
	return &FieldError{Path: path, Sentinel: s, Err: err}
}

// ParsePolicyFile decodes and validates a policy file. Unknown fields,
// repeated fields, trailing data and every invalid value are refused with
// a *FieldError naming the field by its JSON path; a file that parses
// here can still be refused when it is built (a route or a proxy list
// floodgate refuses), with the same kind of error.
func ParsePolicyFile(data []byte) (*PolicyFile, error) {
	if len(data) > MaxPolicyFileBytes {
		return nil, fieldErr("", fmt.Sprintf("file larger than %d bytes", MaxPolicyFileBytes))
	}
	var pf PolicyFile
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := decodeStrict(dec, reflect.ValueOf(&pf).Elem(), ""); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fieldErr("", "data after the JSON object")
	}
	if err := pf.validate(); err != nil {
		return nil, err
	}
	return &pf, nil
}
