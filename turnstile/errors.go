package turnstile

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error returned by this package wraps exactly one
// of them, or, when the caller's own context ended during Verify, that
// context's error (context.Canceled, context.DeadlineExceeded) and none of
// them. A caller picks the answer with errors.Is:
//
//	ErrMissingToken, ErrTokenTooLong  the request is malformed: 400
//	ErrRejected                       the token is not good:     403
//	ErrUnavailable                    no answer could be had:    the caller's policy (503 or fail open)
//	ErrMisconfigured, ErrInvalidRemoteIP
//	                                  the server itself is wrong: 500, never fail open
//	ErrInvalidOption                  New or Middleware was given a bad value
//	context.Canceled, context.DeadlineExceeded (alone)
//	                                  the caller gave up:        no verdict; never fail open
var (
	// ErrMissingToken reports an empty token. Siteverify is not called.
	ErrMissingToken = errors.New("turnstile: missing token")
	// ErrTokenTooLong reports a token longer than MaxTokenLength bytes,
	// which Cloudflare never issues. Siteverify is not called.
	ErrTokenTooLong = errors.New("turnstile: token too long")
	// ErrRejected reports a definitive "no": Cloudflare refused the token
	// (forged, expired, already spent) or the token was issued for another
	// hostname or action than the verifier expects. The error is a
	// *RejectedError carrying the details.
	ErrRejected = errors.New("turnstile: token rejected")
	// ErrUnavailable reports that no verdict could be obtained: siteverify
	// could not be reached, timed out (WithTimeout), kept answering
	// internal-error after the retries, answered with a server error
	// status, with a body that is not a siteverify answer decoded strictly
	// (a field in the wrong case or given twice, a success that is not a
	// boolean, over 64 KiB), or claimed success with a status other than
	// 200. The token may well be good; whether to let the request through
	// is the caller's policy. The caller's own context ending is not
	// reported as ErrUnavailable (see Verifier.Verify).
	ErrUnavailable = errors.New("turnstile: siteverify unavailable")
	// ErrMisconfigured reports that siteverify refused the request itself
	// rather than the token (missing-input-secret, invalid-input-secret,
	// missing-input-response, bad-request), or that the endpoint answered
	// with a redirect, which is never followed: the secret or the endpoint
	// is wrong, or a proxy mangles the request. Every token would fail the same way, so this is
	// an operator's problem, not the visitor's, and never a reason to fail
	// open.
	ErrMisconfigured = errors.New("turnstile: siteverify refused the request")
	// ErrInvalidRemoteIP reports a remote IP argument that is neither empty
	// nor an IP address (for example an IPv6 /64 prefix produced by a
	// rate-limit key function). Siteverify is not called.
	ErrInvalidRemoteIP = errors.New("turnstile: invalid remote IP")
	// ErrInvalidOption reports an empty secret or an option with an invalid
	// value given to New or Middleware.
	ErrInvalidOption = errors.New("turnstile: invalid option")
)

// Error codes found in Result.ErrorCodes and RejectedError.Codes. The first
// eight are Cloudflare's, as documented for siteverify; the last two are
// added by this package when a token Cloudflare accepted fails the
// verifier's own expectations (WithHostnames, WithAction).
const (
	// CodeMissingInputSecret: the secret parameter was not sent.
	CodeMissingInputSecret = "missing-input-secret"
	// CodeInvalidInputSecret: the secret is invalid or does not exist.
	CodeInvalidInputSecret = "invalid-input-secret"
	// CodeMissingInputResponse: the response (token) parameter was not sent.
	CodeMissingInputResponse = "missing-input-response"
	// CodeInvalidInputResponse: the token is invalid or has expired.
	CodeInvalidInputResponse = "invalid-input-response"
	// CodeBadRequest: siteverify could not parse the request.
	CodeBadRequest = "bad-request"
	// CodeTimeoutOrDuplicate: the token was already validated once (tokens
	// are single-use) or is too old.
	CodeTimeoutOrDuplicate = "timeout-or-duplicate"
	// CodeInternalError: siteverify failed internally; the request may be
	// retried, which is the only error code this package retries on.
	CodeInternalError = "internal-error"
	// CodeHostnameMismatch: the token was issued on a hostname that is not
	// one of those given to WithHostnames.
	CodeHostnameMismatch = "hostname-mismatch"
	// CodeActionMismatch: the token was issued for another action than the
	// one given to WithAction.
	CodeActionMismatch = "action-mismatch"
)

// RejectedError is the error returned for a definitive rejection. It wraps
// ErrRejected; retrieve it with errors.As to see why.
type RejectedError struct {
	// Codes are the reasons: Cloudflare's error codes, or
	// CodeHostnameMismatch / CodeActionMismatch. It may be empty when
	// Cloudflare answered success=false without saying why.
	Codes []string
	// Reason is a short human-readable explanation, safe to log.
	Reason string
	// Result is the decoded siteverify answer.
	Result *Result
}

// Error implements error.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("%v: %s", ErrRejected, e.Reason)
}

// Unwrap makes errors.Is(err, ErrRejected) true.
func (e *RejectedError) Unwrap() error { return ErrRejected }

// classify turns a decoded siteverify answer with success=false into the
// matching error, and reports whether it is worth retrying.
func classify(res *Result) (retry bool, err error) {
	codes := res.ErrorCodes
	for _, c := range codes {
		if c == CodeInternalError {
			return true, fmt.Errorf("%w: siteverify answered %s", ErrUnavailable, CodeInternalError)
		}
	}
	for _, c := range codes {
		switch c {
		case CodeMissingInputSecret, CodeInvalidInputSecret, CodeMissingInputResponse, CodeBadRequest:
			return false, fmt.Errorf("%w: %s", ErrMisconfigured, strings.Join(codes, ", "))
		}
	}
	reason := "siteverify answered success=false without an error code"
	if len(codes) > 0 {
		reason = "siteverify answered " + strings.Join(codes, ", ")
	}
	return false, &RejectedError{Codes: codes, Reason: reason, Result: res}
}
