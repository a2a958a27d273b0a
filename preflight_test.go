package floodgate

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"testing"
)

// cors is a minimal CORS handler of the usual shape (rs/cors,
// gorilla/handlers): it answers a preflight itself, 204 with the allow
// headers and no body, and sets the response headers of an actual
// cross-origin request before calling next, so that whatever next
// answers — a 429 included — carries them.
func cors(origin string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") != origin {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Set("Access-Control-Allow-Methods", "GET, POST")
			h.Set("Access-Control-Allow-Headers", "Content-Type")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", "Retry-After, RateLimit, RateLimit-Policy")
		next.ServeHTTP(w, r)
	})
}

const pageOrigin = "https://app.example"

func preflight(path string) *http.Request {
	r := newRequest(http.MethodOptions, path, "198.51.100.4:5000")
	r.Header.Set("Origin", pageOrigin)
	r.Header.Set("Access-Control-Request-Method", "POST")
	r.Header.Set("Access-Control-Request-Headers", "content-type")
	return r
}

func crossOriginPost(path string) *http.Request {
	r := newRequest(http.MethodPost, path, "198.51.100.4:5000")
	r.Header.Set("Origin", pageOrigin)
	r.Header.Set("Content-Type", "application/json")
	return r
}

// A browser's preflight is neither counted nor refused, wherever the CORS
// handler sits; with the CORS handler outside the limit (the placement
// the README gives), the 429 carries Access-Control-Allow-Origin, so the
// page can read it and its Retry-After. Issue 20 §4: before, with the
// limit outside, each preflight spent a unit (1 of 3 POSTs got through on
// a quota of 3) and the 429s carried no CORS headers.
func TestPreflightNeitherCountedNorRefused(t *testing.T) {
	for _, placement := range []string{"limit outside CORS", "CORS outside the limit"} {
		t.Run(placement, func(t *testing.T) {
			handler := &countingHandler{}
			limit := mustMiddleware(t, mustTokenBucket(t, PerHour(3), WithClock(routeClock())))
			var h http.Handler
			if placement == "limit outside CORS" {
				h = limit(cors(pageOrigin, handler))
			} else {
				h = cors(pageOrigin, limit(handler))
			}
			var got []string
			for range 5 { // the page posts 5 times, each after a preflight
				pre := serve(h, preflight("/api/order"))
				post := serve(h, crossOriginPost("/api/order"))
				got = append(got, pre.Result().Status[:3]+"+"+post.Result().Status[:3])
				if pre.Code != http.StatusNoContent || pre.Header().Get("Access-Control-Allow-Methods") == "" || pre.Body.Len() != 0 {
					t.Errorf("preflight answered %d %v %q, want the CORS handler's 204", pre.Code, pre.Header(), pre.Body.String())
				}
				if post.Code == http.StatusTooManyRequests && placement == "CORS outside the limit" &&
					(post.Header().Get("Access-Control-Allow-Origin") != pageOrigin || post.Header().Get("Retry-After") == "") {
					t.Errorf("429 without CORS headers: %v", post.Header())
				}
			}
			if want := "204+200 204+200 204+200 204+429 204+429"; strings.Join(got, " ") != want {
				t.Errorf("preflight+POST statuses %v, want %s", got, want)
			}
			if handler.count() != 3 {
				t.Errorf("the handler ran %d times, want 3", handler.count())
			}
		})
	}
}

// Dressing requests as preflights is no way around the limit. A handler
// that answers OPTIONS as it answers GET (no method check, no CORS
// handler in between) would otherwise serve a username probe to anyone
// sending Origin and Access-Control-Request-Method, as often as they
// like: the first such request it answers with a body ends the
// exemption, with one ERROR line, and the rest are limited.
func TestPreflightServedAsRequestEndsExemption(t *testing.T) {
	var log bytes.Buffer
	probes := 0
	probe := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes++
		_, _ = w.Write([]byte(`{"available":` + boolString(r.URL.Query().Get("userId") != "victim") + `}`))
	})
	limit := mustMiddleware(t, mustTokenBucket(t, PerHour(2), WithClock(routeClock())),
		WithLogger(slog.New(slog.NewJSONHandler(&log, nil))))
	h := limit(probe)
	var codes []int
	for range 20 {
		codes = append(codes, serve(h, preflight("/auth/available/user_id?userId=victim")).Code)
	}
	if probes != 3 {
		t.Errorf("the probe ran %d times for 20 requests dressed as preflights on a quota of 2, want 3 (statuses %v)", probes, codes)
	}
	if codes[3] != http.StatusTooManyRequests || codes[19] != http.StatusTooManyRequests {
		t.Errorf("statuses %v: the dressed requests were not limited", codes)
	}
	lines := logLines(t, &log)
	n := 0
	for _, l := range lines {
		if l["level"] == "ERROR" && strings.Contains(l["msg"].(string), "preflight") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d ERROR lines about preflights, want 1: %v", n, lines)
	}
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// WithLimitPreflights counts preflights as requests; an OPTIONS request
// that is no preflight (no Access-Control-Request-Method) always is.
func TestPreflightsLimitedOnRequest(t *testing.T) {
	handler := &countingHandler{}
	h := mustMiddleware(t, mustTokenBucket(t, PerHour(2), WithClock(routeClock())), WithLimitPreflights())(cors(pageOrigin, handler))
	var codes []int
	for range 3 {
		codes = append(codes, serve(h, preflight("/api/order")).Code)
	}
	if codes[0] != 204 || codes[1] != 204 || codes[2] != 429 {
		t.Errorf("preflights under WithLimitPreflights: %v, want 204 204 429", codes)
	}
	plain := mustMiddleware(t, mustTokenBucket(t, PerHour(1), WithClock(routeClock())))(handler)
	codes = codes[:0]
	for range 2 {
		r := newRequest(http.MethodOptions, "/api/order", "198.51.100.4:5000")
		r.Header.Set("Origin", pageOrigin) // no Access-Control-Request-Method: not a preflight
		codes = append(codes, serve(plain, r).Code)
	}
	if codes[1] != http.StatusTooManyRequests {
		t.Errorf("OPTIONS without Access-Control-Request-Method: %v, want the second limited", codes)
	}
}
