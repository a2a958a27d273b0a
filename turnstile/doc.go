// Package turnstile verifies Cloudflare Turnstile tokens on the server, the
// bot check that comes before floodgate's rate limits on a sign-up or
// log-in form. It needs nothing but the standard library.
//
// # Order: bot check first, then the rate limit
//
// A sign-up endpoint abused by macros is defended in two layers. The
// Turnstile token is checked first: a request without a good token is
// turned away (400 or 403) before it reaches the limiter, so bots cannot
// use up the quota of the nickname pattern or of the shared office IP they
// pretend to be. Only then does the sliding-window limit keyed by the
// nickname pattern (falling back to the client IP) count the request:
//
//	v, err := turnstile.New(os.Getenv("TURNSTILE_SECRET"),
//		turnstile.WithHostnames("example.com"), turnstile.WithAction("signup"))
//	...
//	botCheck, err := turnstile.Middleware(v, turnstile.WithRemoteIP(clientIP))
//	...
//	mux.Handle("POST /signup", botCheck(nicknameLimit(signupHandler)))
//
// Business code that receives the token itself calls Verifier.Verify and
// maps the error with errors.Is: ErrMissingToken or ErrTokenTooLong to
// 400, ErrRejected to 403, ErrUnavailable to its own policy,
// ErrMisconfigured to 500.
//
// # What the verifier does
//
// Verify posts the secret, the token, the visitor's IP (optional) and a
// fresh random idempotency key, form-encoded, to Cloudflare's siteverify
// endpoint (or WithEndpoint's). Empty tokens and tokens over
// MaxTokenLength (2048) are refused without calling out. A call is bounded
// by DefaultTimeout (10 s, WithTimeout) in total; network errors, HTTP 5xx
// and internal-error answers are retried DefaultRetries (2) times after
// 200 ms, then 400 ms (WithRetry), with the same idempotency key so a
// retry never reads as a second use of the token. Definitive answers are
// never retried, and no wait outlasts the deadline. Only an HTTP 200 whose
// body decodes strictly as a siteverify answer (exact field names, none
// twice, success the literal true) passes; a redirect is never followed,
// so the secret goes nowhere else (ErrMisconfigured), and at most 64 KiB
// of an answer is read. When the caller's context ends, Verify returns at
// once with that context's error, not ErrUnavailable: a visitor hanging up
// is not an outage. WithHostnames and WithAction add the checks Cloudflare
// leaves to the site: that the token was solved on your page, for this
// form. New requires a hostname choice: WithHostnames, or WithAnyHostname
// to accept a token solved on any site that embeds the sitekey, so that
// accepting another site's success is never a silent default. Cloudflare's
// dummy secrets answer for the hostname example.com.
//
// # What the middleware does
//
// Middleware reads the token from the "cf-turnstile-response" form field
// (urlencoded or multipart, at most DefaultMaxBodyBytes of body, handed on
// to the handler intact) or from a header (WithTokenHeader), verifies it,
// and passes the Result to the handler in the request context
// (FromContext). Failures get an RFC 9457 application/problem+json answer:
// 400 missing or malformed, 403 rejected, 413 body too large, 500
// misconfigured, and 503 while siteverify cannot be asked. That last one
// is the fail-closed default; WithFailOpen lets requests through instead
// during an outage, leaving the rate limit as the only defence. A request
// whose visitor hung up during the verification never reaches the
// handler, fail-open or not.
//
// Behind a load balancer or CDN, give WithRemoteIP the same trusted-proxy
// client-IP resolution the rate limit uses; the default, PeerIP, is the
// TCP peer, which there is the proxy.
//
// # Testing with Cloudflare's dummy keys
//
// Cloudflare documents keys that behave predictably, for tests and
// development. Sitekeys, for the widget on the page:
//
//	1x00000000000000000000AA  always passes (visible widget)
//	2x00000000000000000000AB  always fails (visible)
//	1x00000000000000000000BB  always passes (invisible)
//	2x00000000000000000000BB  always fails (invisible)
//	3x00000000000000000000FF  forces an interactive challenge (visible)
//
// Secret keys, for this package (New):
//
//	1x0000000000000000000000000000000AA  every token passes
//	2x0000000000000000000000000000000AA  every token fails (invalid-input-response)
//	3x0000000000000000000000000000000AA  every token is already spent (timeout-or-duplicate)
//
// The dummy sitekeys hand the browser the token "XXXX.DUMMY.TOKEN.XXXX";
// pair them with the dummy secrets, not with a real one. The dummy secrets
// are answered by Cloudflare's real endpoint, so a test using them still
// needs the network unless WithEndpoint points at a local fake, as this
// package's own tests do.
package turnstile
