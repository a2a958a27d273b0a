package turnstile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/turnstile"
)

// reached records what the guarded handler saw.
type reached struct {
	called bool
	result *turnstile.Result
	hasRes bool
	body   string
}

// guard wraps a recording handler in the middleware built from v and opts.
func guard(t *testing.T, v *turnstile.Verifier, opts ...turnstile.MiddlewareOption) (http.Handler, *reached) {
	t.Helper()
	mw, err := turnstile.Middleware(v, opts...)
	if err != nil {
		t.Fatalf("Middleware: %v", err)
	}
	got := &reached{}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.called = true
		got.result, got.hasRes = turnstile.FromContext(r.Context())
		b, _ := io.ReadAll(r.Body)
		got.body = string(b)
		w.WriteHeader(http.StatusOK)
	})), got
}

func formRequest(fields url.Values) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(fields.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func multipartRequest(t *testing.T, fields [][2]string) *http.Request {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/signup", &buf)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	return r
}

func jsonRequest(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

type problemBody struct {
	Type   string   `json:"type"`
	Title  string   `json:"title"`
	Status int      `json:"status"`
	Detail string   `json:"detail"`
	Codes  []string `json:"error-codes"`
}

func TestMiddlewareAnswers(t *testing.T) {
	token := url.Values{"nickname": {"abc1"}, turnstile.FormField: {"XXXX.DUMMY.TOKEN.XXXX"}}
	tests := []struct {
		name      string
		secret    string
		unreach   bool // point the verifier at a closed port
		opts      []turnstile.MiddlewareOption
		req       func(t *testing.T) *http.Request
		want      int
		wantCalls int // siteverify calls; -1 when unreachable
		wantCodes []string
		wantRes   bool // handler sees a Result
	}{
		{name: "urlencoded form passes", secret: secretPass, req: func(*testing.T) *http.Request { return formRequest(token) },
			want: 200, wantCalls: 1, wantRes: true},
		{name: "multipart form passes", secret: secretPass,
			req: func(t *testing.T) *http.Request {
				return multipartRequest(t, [][2]string{{"nickname", "abc1"}, {turnstile.FormField, "tok"}})
			},
			want: 200, wantCalls: 1, wantRes: true},
		{name: "header passes", secret: secretPass, opts: []turnstile.MiddlewareOption{turnstile.WithTokenHeader("CF-Turnstile-Response")},
			req: func(*testing.T) *http.Request {
				r := jsonRequest(`{"nickname":"abc1"}`)
				r.Header.Set("CF-Turnstile-Response", "tok")
				return r
			},
			want: 200, wantCalls: 1, wantRes: true},
		{name: "header configured but absent falls back to the form", secret: secretPass,
			opts: []turnstile.MiddlewareOption{turnstile.WithTokenHeader("CF-Turnstile-Response")},
			req:  func(*testing.T) *http.Request { return formRequest(token) }, want: 200, wantCalls: 1, wantRes: true},
		{name: "form without token", secret: secretPass,
			req:  func(*testing.T) *http.Request { return formRequest(url.Values{"nickname": {"abc1"}}) },
			want: 400, wantCalls: 0},
		{name: "multipart without token", secret: secretPass,
			req:  func(t *testing.T) *http.Request { return multipartRequest(t, [][2]string{{"nickname", "abc1"}}) },
			want: 400, wantCalls: 0},
		{name: "GET without body", secret: secretPass,
			req:  func(*testing.T) *http.Request { return httptest.NewRequest(http.MethodGet, "/signup", nil) },
			want: 400, wantCalls: 0},
		{name: "JSON body without header option", secret: secretPass,
			req:  func(*testing.T) *http.Request { return jsonRequest(`{"cf-turnstile-response":"tok"}`) },
			want: 400, wantCalls: 0},
		{name: "token only in the query string", secret: secretPass,
			req: func(*testing.T) *http.Request {
				return httptest.NewRequest(http.MethodPost, "/signup?cf-turnstile-response=tok", nil)
			},
			want: 400, wantCalls: 0},
		{name: "token too long", secret: secretPass,
			req: func(*testing.T) *http.Request {
				return formRequest(url.Values{turnstile.FormField: {strings.Repeat("x", turnstile.MaxTokenLength+1)}})
			},
			want: 400, wantCalls: 0},
		{name: "malformed urlencoded body", secret: secretPass,
			req: func(*testing.T) *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader("cf-turnstile-response=%zz"))
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				return r
			},
			want: 400, wantCalls: 0},
		{name: "multipart without boundary", secret: secretPass,
			req: func(*testing.T) *http.Request {
				r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader("--x\r\n"))
				r.Header.Set("Content-Type", "multipart/form-data")
				return r
			},
			want: 400, wantCalls: 0},
		{name: "body over the bound", secret: secretPass, opts: []turnstile.MiddlewareOption{turnstile.WithMaxBodyBytes(64)},
			req: func(*testing.T) *http.Request {
				return formRequest(url.Values{turnstile.FormField: {"tok"}, "bio": {strings.Repeat("b", 100)}})
			},
			want: 413, wantCalls: 0},
		{name: "rejected token", secret: secretFail, req: func(*testing.T) *http.Request { return formRequest(token) },
			want: 403, wantCalls: 1, wantCodes: []string{turnstile.CodeInvalidInputResponse}},
		{name: "spent token", secret: secretSpent, req: func(*testing.T) *http.Request { return formRequest(token) },
			want: 403, wantCalls: 1, wantCodes: []string{turnstile.CodeTimeoutOrDuplicate}},
		{name: "rejected token with fail-open is still refused", secret: secretFail,
			opts: []turnstile.MiddlewareOption{turnstile.WithFailOpen()},
			req:  func(*testing.T) *http.Request { return formRequest(token) },
			want: 403, wantCalls: 1, wantCodes: []string{turnstile.CodeInvalidInputResponse}},
		{name: "wrong secret", secret: "0x4AAAAAAAnotARealSecret", req: func(*testing.T) *http.Request { return formRequest(token) },
			want: 500, wantCalls: 1},
		{name: "wrong secret with fail-open is still refused", secret: "0x4AAAAAAAnotARealSecret",
			opts: []turnstile.MiddlewareOption{turnstile.WithFailOpen()},
			req:  func(*testing.T) *http.Request { return formRequest(token) }, want: 500, wantCalls: 1},
		{name: "remote IP function returns a prefix", secret: secretPass,
			opts: []turnstile.MiddlewareOption{turnstile.WithRemoteIP(func(*http.Request) string { return "2001:db8::/64" })},
			req:  func(*testing.T) *http.Request { return formRequest(token) }, want: 500, wantCalls: 0},
		{name: "unreachable fails closed", secret: secretPass, unreach: true,
			req: func(*testing.T) *http.Request { return formRequest(token) }, want: 503, wantCalls: -1},
		{name: "unreachable with fail-open passes without a Result", secret: secretPass, unreach: true,
			opts: []turnstile.MiddlewareOption{turnstile.WithFailOpen()},
			req:  func(*testing.T) *http.Request { return formRequest(token) }, want: 200, wantCalls: -1, wantRes: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			var v *turnstile.Verifier
			if tt.unreach {
				var err error
				v, err = turnstile.New(tt.secret, turnstile.WithEndpoint(unreachableURL(t)), turnstile.WithRetry(1, time.Millisecond), turnstile.WithHostnames("example.com"))
				if err != nil {
					t.Fatal(err)
				}
			} else {
				v = newVerifier(t, f, tt.secret)
			}
			h, got := guard(t, v, tt.opts...)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req(t))

			if rec.Code != tt.want {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.want, rec.Body)
			}
			if tt.wantCalls >= 0 {
				if n := len(f.seen()); n != tt.wantCalls {
					t.Errorf("siteverify calls = %d, want %d", n, tt.wantCalls)
				}
			}
			if tt.want == http.StatusOK {
				if !got.called || got.hasRes != tt.wantRes {
					t.Errorf("handler called %v with a Result %v, want called with a Result %v", got.called, got.hasRes, tt.wantRes)
				}
				return
			}
			if got.called {
				t.Errorf("handler was called for a %d", tt.want)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type = %q, want application/problem+json", ct)
			}
			var p problemBody
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("problem body %q: %v", rec.Body, err)
			}
			if p.Type != "about:blank" || p.Status != tt.want || p.Title != http.StatusText(tt.want) || p.Detail == "" {
				t.Errorf("problem = %+v, want about:blank, status %d, title %q and a detail", p, tt.want, http.StatusText(tt.want))
			}
			if !slices.Equal(p.Codes, tt.wantCodes) {
				t.Errorf("problem error-codes = %v, want %v", p.Codes, tt.wantCodes)
			}
			if strings.Contains(rec.Body.String(), tt.secret) {
				t.Errorf("problem body leaks the secret: %s", rec.Body)
			}
		})
	}
}

func TestMiddlewareBodyStaysReadable(t *testing.T) {
	tests := []struct {
		name string
		opts []turnstile.MiddlewareOption
		req  func(t *testing.T) *http.Request
		// check inspects the request as the handler sees it.
		check func(t *testing.T, r *http.Request)
	}{
		{
			name: "urlencoded form",
			req: func(*testing.T) *http.Request {
				return formRequest(url.Values{"nickname": {"abc1"}, turnstile.FormField: {"tok"}})
			},
			check: func(t *testing.T, r *http.Request) {
				if got := r.FormValue("nickname"); got != "abc1" {
					t.Errorf("FormValue(nickname) = %q, want abc1", got)
				}
				if got := r.FormValue(turnstile.FormField); got != "tok" {
					t.Errorf("FormValue(%s) = %q, want tok", turnstile.FormField, got)
				}
			},
		},
		{
			name: "multipart form",
			req: func(t *testing.T) *http.Request {
				return multipartRequest(t, [][2]string{{"nickname", "abc1"}, {turnstile.FormField, "tok"}, {"bio", "hi"}})
			},
			check: func(t *testing.T, r *http.Request) {
				if err := r.ParseMultipartForm(1 << 20); err != nil {
					t.Fatalf("ParseMultipartForm: %v", err)
				}
				if r.FormValue("nickname") != "abc1" || r.FormValue("bio") != "hi" {
					t.Errorf("form = %v, want nickname and bio", r.MultipartForm.Value)
				}
			},
		},
		{
			name: "JSON body, token in a header",
			opts: []turnstile.MiddlewareOption{turnstile.WithTokenHeader("CF-Turnstile-Response")},
			req: func(*testing.T) *http.Request {
				r := jsonRequest(`{"nickname":"abc1"}`)
				r.Header.Set("CF-Turnstile-Response", "tok")
				return r
			},
			check: func(t *testing.T, r *http.Request) {
				var body struct{ Nickname string }
				if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Nickname != "abc1" {
					t.Errorf("JSON body = %+v, %v; want nickname abc1", body, err)
				}
			},
		},
		{
			name: "urlencoded body, token in a header",
			opts: []turnstile.MiddlewareOption{turnstile.WithTokenHeader("CF-Turnstile-Response")},
			req: func(*testing.T) *http.Request {
				r := formRequest(url.Values{"nickname": {"abc1"}})
				r.Header.Set("CF-Turnstile-Response", "tok")
				return r
			},
			check: func(t *testing.T, r *http.Request) {
				if got := r.FormValue("nickname"); got != "abc1" {
					t.Errorf("FormValue(nickname) = %q, want abc1", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			mw, err := turnstile.Middleware(newVerifier(t, f, secretPass), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			called := false
			h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				called = true
				tt.check(t, r)
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req(t))
			if !called || rec.Code != http.StatusOK {
				t.Fatalf("handler called %v, status %d; want called, 200 (body %s)", called, rec.Code, rec.Body)
			}
		})
	}
}

func TestMiddlewareHandsOverResult(t *testing.T) {
	f := newFake(t)
	f.set(func(f *fakeSiteverify) { f.action, f.cdata = "signup", "c-1" })
	h, got := guard(t, newVerifier(t, f, secretPass, turnstile.WithAction("signup")))
	h.ServeHTTP(httptest.NewRecorder(), formRequest(url.Values{turnstile.FormField: {"tok"}}))
	if !got.hasRes || got.result.Hostname != "example.com" || got.result.Action != "signup" || got.result.CData != "c-1" {
		t.Fatalf("FromContext in the handler = %+v, %v; want the verified Result", got.result, got.hasRes)
	}
	if res, ok := turnstile.FromContext(context.Background()); ok || res != nil {
		t.Errorf("FromContext on a bare context = %v, %v; want nil, false", res, ok)
	}
}

func TestMiddlewareRemoteIP(t *testing.T) {
	tests := []struct {
		name       string
		remoteAddr string
		opts       []turnstile.MiddlewareOption
		want       string // remoteip sent, "" for none
	}{
		{"default: TCP peer without port", "192.0.2.1:1234", nil, "192.0.2.1"},
		{"default: IPv6 peer", "[2001:db8::7]:443", nil, "2001:db8::7"},
		{"default: unparsable peer sends none", "pipe", nil, ""},
		{"custom function", "10.0.0.1:1234",
			[]turnstile.MiddlewareOption{turnstile.WithRemoteIP(func(r *http.Request) string { return r.Header.Get("X-Test-Client") })},
			"198.51.100.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			h, _ := guard(t, newVerifier(t, f, secretPass), tt.opts...)
			r := formRequest(url.Values{turnstile.FormField: {"tok"}})
			r.RemoteAddr = tt.remoteAddr
			r.Header.Set("X-Test-Client", "198.51.100.9")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			calls := f.seen()
			if rec.Code != http.StatusOK || len(calls) != 1 {
				t.Fatalf("status %d after %d calls, want 200 after 1", rec.Code, len(calls))
			}
			if got := calls[0].form.Get("remoteip"); got != tt.want {
				t.Errorf("remoteip = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMiddlewareErrorHandler(t *testing.T) {
	f := newFake(t)
	var gotStatus int
	var gotErr error
	h, reachedNext := guard(t, newVerifier(t, f, secretSpent), turnstile.WithErrorHandler(
		func(w http.ResponseWriter, r *http.Request, status int, err error) {
			gotStatus, gotErr = status, err
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"resultCode":"BPLTE403","data":null}`)
		}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, formRequest(url.Values{turnstile.FormField: {"tok"}}))
	if gotStatus != http.StatusForbidden || !errors.Is(gotErr, turnstile.ErrRejected) || reachedNext.called {
		t.Fatalf("error handler got %d, %v (next called %v); want 403, ErrRejected", gotStatus, gotErr, reachedNext.called)
	}
	if rec.Code != http.StatusForbidden || rec.Body.String() != `{"resultCode":"BPLTE403","data":null}` {
		t.Errorf("answer = %d %s, want the custom envelope", rec.Code, rec.Body)
	}
}

func TestWriteProblemAfterLogging(t *testing.T) {
	f := newFake(t)
	var logged []int
	h, _ := guard(t, newVerifier(t, f, secretFail), turnstile.WithErrorHandler(
		func(w http.ResponseWriter, r *http.Request, status int, err error) {
			logged = append(logged, status)
			turnstile.WriteProblem(w, r, status, err)
		}))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, formRequest(url.Values{turnstile.FormField: {"tok"}}))
	want := `{"type":"about:blank","title":"Forbidden","status":403,` +
		`"detail":"The bot check rejected the token; solve the challenge again.","error-codes":["invalid-input-response"]}` + "\n"
	if !slices.Equal(logged, []int{403}) || rec.Code != 403 || rec.Body.String() != want {
		t.Errorf("logged %v, answered %d %q; want [403], 403 %q", logged, rec.Code, rec.Body, want)
	}
}

func TestMiddlewareInvalidOptions(t *testing.T) {
	f := newFake(t)
	v := newVerifier(t, f, secretPass)
	tests := []struct {
		name string
		v    *turnstile.Verifier
		opt  turnstile.MiddlewareOption
	}{
		{"nil verifier", nil, turnstile.WithFailOpen()},
		{"nil option", v, nil},
		{"empty header name", v, turnstile.WithTokenHeader("")},
		{"zero body bound", v, turnstile.WithMaxBodyBytes(0)},
		{"nil remote IP function", v, turnstile.WithRemoteIP(nil)},
		{"nil error handler", v, turnstile.WithErrorHandler(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mw, err := turnstile.Middleware(tt.v, tt.opt)
			if !errors.Is(err, turnstile.ErrInvalidOption) || mw != nil {
				t.Fatalf("Middleware error = %v, want ErrInvalidOption and no middleware", err)
			}
		})
	}
}
