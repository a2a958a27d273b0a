package turnstile

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Defaults and limits of a Verifier.
const (
	// DefaultEndpoint is Cloudflare's siteverify endpoint.
	DefaultEndpoint = "https://challenges.cloudflare.com/turnstile/v0/siteverify"
	// DefaultTimeout bounds one Verify call, retries and backoff included,
	// unless WithTimeout says otherwise. Siteverify normally answers in well
	// under a second; ten seconds leaves room for retries without holding a
	// visitor's request for long.
	DefaultTimeout = 10 * time.Second
	// DefaultRetries is how many times a Verify call is retried after a
	// network error, a server error status or an internal-error answer,
	// unless WithRetry says otherwise: at most three attempts in all.
	DefaultRetries = 2
	// DefaultBackoff is the wait before the first retry, doubled before
	// each further one (200 ms, then 400 ms), unless WithRetry says
	// otherwise.
	DefaultBackoff = 200 * time.Millisecond
	// MaxTokenLength is the longest token Cloudflare issues, in bytes
	// (tokens are ASCII). Longer ones are refused without calling out.
	MaxTokenLength = 2048
	// maxResponseBytes bounds how much of a siteverify answer is read. A
	// real answer is a few hundred bytes; anything near this is not one.
	maxResponseBytes = 64 << 10
)

// Verifier checks Turnstile tokens against siteverify with one site's
// secret. It is safe for concurrent use and holds no per-call state, so one
// Verifier serves a whole process.
//
// Verify answers with a *Result when the token is good, otherwise with an
// error wrapping one of the package's sentinels (see ErrRejected and its
// siblings), so business code and the Middleware alike can map it to a
// status:
//
//	res, err := v.Verify(ctx, token, clientIP)
//	switch {
//	case err == nil: // a human: go on, res says where and for what
//	case errors.Is(err, turnstile.ErrRejected): // 403
//	case errors.Is(err, turnstile.ErrUnavailable): // policy: 503, or let through
//	case errors.Is(err, turnstile.ErrMisconfigured): // 500
//	default: // 400: ErrMissingToken, ErrTokenTooLong (500 for ErrInvalidRemoteIP)
//	}
//
// Each Verify call sends a fresh random idempotency key and sends the same
// key again on its retries, so a retry of an attempt whose answer was lost
// gets that answer instead of timeout-or-duplicate. Only network errors,
// server error statuses (5xx) and internal-error answers are retried; a
// definitive answer never is, and nothing is retried once the caller's
// context is done.
//
// Only what siteverify really said passes: an HTTP 200 whose body is a
// siteverify answer decoded strictly (field names exactly as Cloudflare
// writes them, each at most once, "success" the JSON literal true). A
// redirect is never followed, so the secret is never sent anywhere but
// the endpoint, and at most 64 KiB of an answer is read.
type Verifier struct {
	secret    string
	endpoint  string
	client    *http.Client
	timeout   time.Duration
	retries   int
	backoff   time.Duration
	hostnames []string
	// anyHostname records WithAnyHostname: hostnames is empty on purpose.
	anyHostname bool
	action      string
}

// Option configures a Verifier.
type Option func(*Verifier) error

// New returns a Verifier for the site whose secret key is secret, and the
// hostnames its tokens must be solved on: WithHostnames, the recommended
// shape (with WithAction where the page's widget sets an action), or
// WithAnyHostname, to accept a token solved on any page that embeds the
// sitekey, deliberately. Without either, Cloudflare's success for a token
// solved on someone else's site would pass; New refuses that silent
// default with an error wrapping ErrInvalidOption, as it refuses both
// together, an empty secret (a verifier without one could only reject
// everyone) and an invalid option.
func New(secret string, opts ...Option) (*Verifier, error) {
	if secret == "" {
		return nil, fmt.Errorf("%w: empty secret", ErrInvalidOption)
	}
	v := &Verifier{
		secret:   secret,
		endpoint: DefaultEndpoint,
		client:   &http.Client{CheckRedirect: refuseRedirect},
		timeout:  DefaultTimeout,
		retries:  DefaultRetries,
		backoff:  DefaultBackoff,
	}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidOption)
		}
		if err := o(v); err != nil {
			return nil, err
		}
	}
	switch {
	case len(v.hostnames) == 0 && !v.anyHostname:
		return nil, fmt.Errorf("%w: no hostname choice: pass WithHostnames with the hostnames of the pages that show the widget, so that a token solved on another site is rejected, or WithAnyHostname to accept it deliberately", ErrInvalidOption)
	case len(v.hostnames) > 0 && v.anyHostname:
		return nil, fmt.Errorf("%w: WithHostnames and WithAnyHostname contradict each other; choose one", ErrInvalidOption)
	}
	return v, nil
}

// WithEndpoint sends verifications to endpoint instead of DefaultEndpoint:
// a test server, or an egress proxy. It must be an absolute http or https
// URL.
func WithEndpoint(endpoint string) Option {
	return func(v *Verifier) error {
		u, err := url.Parse(endpoint)
		if err != nil {
			return fmt.Errorf("%w: endpoint %q: %v", ErrInvalidOption, endpoint, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: endpoint %q is not an absolute http(s) URL", ErrInvalidOption, endpoint)
		}
		v.endpoint = endpoint
		return nil
	}
}

// WithHTTPClient makes the verifier use c's transport, cookie jar and
// timeout, for example a custom transport or an egress proxy. The default
// is a client on http.DefaultTransport. The verifier's own timeout applies
// on top of any timeout c has. The verifier works on a copy of c that
// never follows a redirect, whatever c.CheckRedirect says, since a
// redirect would carry the secret to another URL; c itself is not
// modified.
func WithHTTPClient(c *http.Client) Option {
	return func(v *Verifier) error {
		if c == nil {
			return fmt.Errorf("%w: nil HTTP client", ErrInvalidOption)
		}
		own := *c
		own.CheckRedirect = refuseRedirect
		v.client = &own
		return nil
	}
}

// refuseRedirect is every verifier client's CheckRedirect: the redirect
// response itself is returned, never followed, and reported as
// ErrMisconfigured.
func refuseRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// WithTimeout bounds each Verify call, all its attempts and waits included
// (default DefaultTimeout). A shorter deadline on the caller's context wins.
func WithTimeout(d time.Duration) Option {
	return func(v *Verifier) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %s must be positive", ErrInvalidOption, d)
		}
		v.timeout = d
		return nil
	}
}

// WithRetry sets how many times a Verify call is retried after a transient
// failure (default DefaultRetries; 0 disables retries) and the wait before
// the first retry, doubled before each further one (default
// DefaultBackoff, at most a minute). A retry that could not start before
// the deadline is not waited for: Verify returns at once.
func WithRetry(retries int, backoff time.Duration) Option {
	return func(v *Verifier) error {
		if retries < 0 || retries > 10 {
			return fmt.Errorf("%w: retries %d must be in 0..10", ErrInvalidOption, retries)
		}
		if backoff <= 0 || backoff > time.Minute {
			return fmt.Errorf("%w: backoff %s must be in (0, 1m]", ErrInvalidOption, backoff)
		}
		v.retries, v.backoff = retries, backoff
		return nil
	}
}

// WithHostnames makes the verifier reject a token, even one Cloudflare
// accepts, unless it was issued on one of hosts (compared without regard
// to case): the hostnames of the pages that show the widget. It is
// Cloudflare's server-side advice, and New requires it or
// WithAnyHostname: without a check, a token solved on someone else's page
// that embeds your sitekey would pass. Given twice, the second list
// replaces the first.
func WithHostnames(hosts ...string) Option {
	return func(v *Verifier) error {
		if len(hosts) == 0 {
			return fmt.Errorf("%w: WithHostnames needs at least one hostname", ErrInvalidOption)
		}
		for _, h := range hosts {
			if h == "" {
				return fmt.Errorf("%w: empty hostname", ErrInvalidOption)
			}
		}
		v.hostnames = append([]string(nil), hosts...)
		return nil
	}
}

// WithAnyHostname makes the verifier accept a token whatever hostname it
// was solved on, leaving the matter to the hostnames the widget is
// restricted to in Cloudflare's dashboard. It is the deliberate form of
// what was once the default; prefer WithHostnames. It cannot be combined
// with WithHostnames.
func WithAnyHostname() Option {
	return func(v *Verifier) error {
		v.anyHostname = true
		return nil
	}
}

// WithAction makes the verifier reject a token unless it was issued for
// action (the widget's data-action), so a token solved on the log-in form
// cannot be spent on the sign-up form. Without it any action is accepted.
func WithAction(action string) Option {
	return func(v *Verifier) error {
		if action == "" {
			return fmt.Errorf("%w: empty action", ErrInvalidOption)
		}
		v.action = action
		return nil
	}
}

// Result is a decoded siteverify answer.
type Result struct {
	// Success is Cloudflare's verdict. A Result returned by Verify without
	// an error always has Success set.
	Success bool
	// ChallengeTS is when the challenge was solved.
	ChallengeTS time.Time
	// Hostname is the hostname of the page the challenge was solved on.
	Hostname string
	// Action is the widget's action, as set on the page.
	Action string
	// CData is the customer data the page passed to the widget.
	CData string
	// ErrorCodes are Cloudflare's error codes (see the Code constants).
	ErrorCodes []string
}

// wireResult holds the fields of a siteverify answer as decoded; fields
// names them.
type wireResult struct {
	Success     *bool
	ChallengeTS string
	Hostname    string
	ErrorCodes  []string
	Action      string
	CData       string
}

// Verify checks token with siteverify. remoteIP is the visitor's address,
// sent to Cloudflare as an extra signal; it may be empty, otherwise it must
// be an IP address (ErrInvalidRemoteIP).
//
// An empty token (ErrMissingToken), a token over MaxTokenLength
// (ErrTokenTooLong) and a bad remoteIP are refused without calling out.
// Otherwise the answer is a *Result with a nil error when the token is
// good, or an error wrapping ErrRejected, ErrUnavailable or
// ErrMisconfigured. A verification that the verifier's own timeout
// (WithTimeout) cuts short is ErrUnavailable, wrapping
// context.DeadlineExceeded.
//
// When ctx itself is done (the visitor hung up, or the caller's deadline
// passed) Verify stops at once, retries nothing, and returns an error that
// wraps ctx's error (context.Canceled or context.DeadlineExceeded) and
// none of the package's sentinels: it is not an outage, so it must not be
// answered as one (the Middleware never lets such a request through, even
// under WithFailOpen).
func (v *Verifier) Verify(ctx context.Context, token, remoteIP string) (*Result, error) {
	switch {
	case token == "":
		return nil, ErrMissingToken
	case len(token) > MaxTokenLength:
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrTokenTooLong, len(token), MaxTokenLength)
	}
	form := url.Values{"secret": {v.secret}, "response": {token}}
	if remoteIP != "" {
		addr, err := netip.ParseAddr(remoteIP)
		if err != nil {
			return nil, fmt.Errorf("%w: %q", ErrInvalidRemoteIP, remoteIP)
		}
		form.Set("remoteip", addr.Unmap().WithZone("").String())
	}
	key, err := newIdempotencyKey()
	if err != nil {
		return nil, fmt.Errorf("%w: idempotency key: %w", ErrUnavailable, err)
	}
	form.Set("idempotency_key", key)
	body := form.Encode()

	caller := ctx
	if caller.Err() != nil {
		return nil, abandoned(caller, nil)
	}
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	backoff := v.backoff
	for attempt := 0; ; attempt++ {
		res, retry, err := v.attempt(ctx, body)
		if err != nil && caller.Err() != nil {
			// Whatever the attempt made of it, the caller is gone: no
			// verdict is owed, and none was had.
			return nil, abandoned(caller, err)
		}
		if !retry || attempt == v.retries {
			return res, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w (after %v)", ErrUnavailable, ctx.Err(), err)
		}
		// Do not start a wait that would outlast the deadline: the retry
		// could not happen, and the caller deserves its answer now.
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= backoff {
			return nil, fmt.Errorf("%w: no time left to retry after %d attempts: %w", ErrUnavailable, attempt+1, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if caller.Err() != nil {
				return nil, abandoned(caller, err)
			}
			return nil, fmt.Errorf("%w: %w (after %v)", ErrUnavailable, ctx.Err(), err)
		case <-t.C:
		}
		backoff *= 2
	}
}

// abandoned is the error of a verification whose caller's context ended:
// it wraps the context's error, and the attempt's error (which may wrap a
// sentinel such as ErrUnavailable) only as text, so that errors.Is finds
// context.Canceled or context.DeadlineExceeded and no sentinel.
func abandoned(caller context.Context, last error) error {
	if last == nil {
		return fmt.Errorf("turnstile: verification abandoned: %w", caller.Err())
	}
	return fmt.Errorf("turnstile: verification abandoned: %w (last attempt: %v)", caller.Err(), last)
}

// attempt makes one siteverify request and reports whether a failure is
// worth retrying.
func (v *Verifier) attempt(ctx context.Context, body string) (_ *Result, retry bool, _ error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.endpoint, strings.NewReader(body))
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrMisconfigured, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		// Transport failures (refused, reset, DNS, timeout) are transient,
		// unless it is ctx that ended: then there is no time to retry.
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		return nil, true, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer func() {
		// Drain a little so the connection can be reused, then close; the
		// answer is read (or its error returned) by now, so a close error
		// cannot change the outcome.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		_ = resp.Body.Close()
	}()
	switch {
	case resp.StatusCode >= 500:
		return nil, true, fmt.Errorf("%w: siteverify answered HTTP %d", ErrUnavailable, resp.StatusCode)
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// Following it would post the secret to wherever the answer
		// points. Siteverify does not redirect; an endpoint that does is
		// the wrong one (http for https, say), which the operator fixes.
		return nil, false, fmt.Errorf("%w: siteverify answered HTTP %d redirecting to %q; redirects are not followed",
			ErrMisconfigured, resp.StatusCode, resp.Header.Get("Location"))
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		return nil, true, fmt.Errorf("%w: reading the answer: %w", ErrUnavailable, err)
	}
	if len(raw) > maxResponseBytes {
		return nil, false, fmt.Errorf("%w: answer larger than %d bytes", ErrUnavailable, maxResponseBytes)
	}
	res, err := decode(raw)
	if err != nil {
		// A 200 that is not a siteverify answer (a captive portal, a
		// proxy's error page) will not improve on retry.
		return nil, false, fmt.Errorf("%w: HTTP %d: %w", ErrUnavailable, resp.StatusCode, err)
	}
	if !res.Success {
		// A "no" is believed whatever the status: it can only refuse.
		retry, err := classify(res)
		return nil, retry, err
	}
	if resp.StatusCode != http.StatusOK {
		// Siteverify says yes with a 200 and nothing else; a success under
		// another status came from something that is not siteverify.
		return nil, false, fmt.Errorf("%w: HTTP %d claiming success is not a siteverify answer", ErrUnavailable, resp.StatusCode)
	}
	if err := v.expect(res); err != nil {
		return nil, false, err
	}
	return res, false, nil
}

// fields maps each field of a siteverify answer, by its exact name, to
// where its value is decoded.
func (w *wireResult) fields() map[string]any {
	return map[string]any{
		"success":      &w.Success,
		"challenge_ts": &w.ChallengeTS,
		"hostname":     &w.Hostname,
		"error-codes":  &w.ErrorCodes,
		"action":       &w.Action,
		"cdata":        &w.CData,
	}
}

// decode parses a siteverify answer strictly. encoding/json alone would
// take "SUCCESS" for "success" and let the last of two "success" fields
// win, so the object is walked field by field: a known field must be
// spelled exactly as siteverify writes it and appear once, a name that
// differs from a known one only in case is refused rather than ignored,
// "success" must be the literal true or false, and nothing may follow the
// object. Fields siteverify may add later (metadata, say) are skipped. A
// body without a success field, or with a timestamp that does not parse,
// is not an answer either.
func decode(raw []byte) (*Result, error) {
	var w wireResult
	known := w.fields()
	seen := make(map[string]bool, len(known))
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("malformed answer: not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("malformed answer: %w", err)
		}
		name, _ := tok.(string) // inside an object, a key is always a string
		if seen[name] {
			return nil, fmt.Errorf("malformed answer: field %q given twice", name)
		}
		seen[name] = true
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("malformed answer: field %q: %w", name, err)
		}
		dst, ok := known[name]
		if !ok {
			for k := range known {
				if strings.EqualFold(k, name) {
					return nil, fmt.Errorf("malformed answer: field %q is not %q", name, k)
				}
			}
			continue
		}
		if name == "success" && !bytes.Equal(val, []byte("true")) && !bytes.Equal(val, []byte("false")) {
			return nil, errors.New("malformed answer: success is not a boolean")
		}
		if err := json.Unmarshal(val, dst); err != nil {
			return nil, fmt.Errorf("malformed answer: field %q: %w", name, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("malformed answer: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("malformed answer: data after the JSON object")
	}
	if w.Success == nil {
		return nil, errors.New("malformed answer: no success field")
	}
	res := &Result{
		Success:    *w.Success,
		Hostname:   w.Hostname,
		Action:     w.Action,
		CData:      w.CData,
		ErrorCodes: w.ErrorCodes,
	}
	if w.ChallengeTS != "" {
		ts, err := time.Parse(time.RFC3339Nano, w.ChallengeTS)
		if err != nil {
			return nil, fmt.Errorf("malformed answer: challenge_ts: %w", err)
		}
		res.ChallengeTS = ts
	}
	return res, nil
}

// expect applies the verifier's own requirements to a token Cloudflare
// accepted.
func (v *Verifier) expect(res *Result) error {
	if len(v.hostnames) > 0 {
		ok := false
		for _, h := range v.hostnames {
			if strings.EqualFold(h, res.Hostname) {
				ok = true
				break
			}
		}
		if !ok {
			return &RejectedError{
				Codes:  []string{CodeHostnameMismatch},
				Reason: fmt.Sprintf("token issued on hostname %q, expected one of %q", res.Hostname, v.hostnames),
				Result: res,
			}
		}
	}
	if v.action != "" && res.Action != v.action {
		return &RejectedError{
			Codes:  []string{CodeActionMismatch},
			Reason: fmt.Sprintf("token issued for action %q, expected %q", res.Action, v.action),
			Result: res,
		}
	}
	return nil
}

// newIdempotencyKey returns a random (version 4) UUID.
func newIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:]), nil
}
