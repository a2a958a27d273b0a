package floodgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// The attacks of issue 18 item 1 on key functions that read the request:
// a request counted under one value and handled with another. Each was
// written first and failed on the code before its fix.

// guessLimit is the login's limit on password guesses per user; the
// fallback per IP is lenient, as for users behind one NAT.
const (
	guessLimit  = 3
	guessIPRate = 100
	guesses     = 20
)

// accessor is one of the standard ways a handler reads a form field.
type accessor struct {
	name string
	read func(r *http.Request, field string) string
}

var accessors = []accessor{
	{"FormValue", func(r *http.Request, f string) string { return r.FormValue(f) }},
	{"PostFormValue", func(r *http.Request, f string) string { return r.PostFormValue(f) }},
	{"ParseForm then Form.Get", func(r *http.Request, f string) string { _ = r.ParseForm(); return r.Form.Get(f) }},
	{"ParseMultipartForm then Form.Get", func(r *http.Request, f string) string {
		_ = r.ParseMultipartForm(1 << 20)
		return r.Form.Get(f)
	}},
	{"ParseMultipartForm then PostForm.Get", func(r *http.Request, f string) string {
		_ = r.ParseMultipartForm(1 << 20)
		return r.PostForm.Get(f)
	}},
	{"last value of Form", func(r *http.Request, f string) string {
		_ = r.ParseMultipartForm(1 << 20)
		return last(r.Form[f])
	}},
	{"URL.Query().Get", func(r *http.Request, f string) string { return r.URL.Query().Get(f) }},
	{"last value of MultipartForm.Value", func(r *http.Request, f string) string {
		if r.ParseMultipartForm(1<<20) != nil || r.MultipartForm == nil {
			return ""
		}
		return last(r.MultipartForm.Value[f])
	}},
	{"last value streamed from MultipartReader", func(r *http.Request, f string) string {
		mr, err := r.MultipartReader()
		if err != nil {
			return ""
		}
		return last(streamValues(mr, f))
	}},
}

// headerAccessors are the ways a handler reads a header.
var headerAccessors = []accessor{
	{"Header.Get", func(r *http.Request, f string) string { return r.Header.Get(f) }},
	{"last line", func(r *http.Request, f string) string { return last(r.Header.Values(f)) }},
	{"first non-empty line", func(r *http.Request, f string) string {
		for _, v := range r.Header.Values(f) {
			if v = strings.TrimSpace(v); v != "" {
				return v
			}
		}
		return ""
	}},
}

func last(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// keyAttack is one spelling of a guess against the victim's password:
// req builds guess i, which an attacker varies to get a fresh key.
type keyAttack struct {
	name string
	req  func(i int) *http.Request
	// refused: the request is ambiguous, and must be answered 400 without
	// reaching the handler. Otherwise it must be counted under the
	// victim (or reach no handler that acts on the victim).
	refused bool
}

// loginAttempts runs the guesses of a against a login limited per user by
// key (then per IP), whose handler reads the user with acc, under the
// error policy opts. It returns how many guesses the handler acted on
// against "victim" and the statuses answered.
func loginAttempts(t *testing.T, key KeyFunc, acc accessor, field string, a keyAttack, opts ...MiddlewareOption) (acted int, statuses map[int]int) {
	t.Helper()
	return loginBehind(t, loginSetup{key: key, acc: acc, field: field}, a, opts...)
}

// loginSetup is a login for loginBehind: its key function, how its
// handler reads field, and what wraps the handler inside the limit.
type loginSetup struct {
	key   KeyFunc
	acc   accessor
	field string
	inner func(http.Handler) http.Handler // nil: nothing
}

// loginBehind is loginAttempts for the login s.
func loginBehind(t *testing.T, s loginSetup, a keyAttack, opts ...MiddlewareOption) (acted int, statuses map[int]int) {
	t.Helper()
	key, acc, field := s.key, s.acc, s.field
	byUser := mustTokenBucket(t, PerHour(guessLimit))
	byIP := mustTokenBucket(t, PerHour(guessIPRate))
	sel, err := NewPolicySelector(
		Policy{Name: "user", Limiter: byUser, Key: key},
		Policy{Name: "ip", Limiter: byIP, Key: mustKeyByIP(t)},
	)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := NewPolicyMiddleware(sel, opts...)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acc.read(r, field) == "victim" {
			mu.Lock()
			acted++
			mu.Unlock()
		}
		if r.MultipartForm != nil {
			_ = r.MultipartForm.RemoveAll()
		}
		w.WriteHeader(http.StatusUnauthorized) // wrong password
	})
	if s.inner != nil {
		handler = s.inner(handler)
	}
	login := mw(handler)
	statuses = map[int]int{}
	for i := range guesses {
		r := a.req(i)
		r.RemoteAddr = "203.0.113.7:4000"
		statuses[serve(login, r).Code]++
	}
	return acted, statuses
}

func formPost(target, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func multipartPost(t *testing.T, method, target string, parts ...string) *http.Request {
	body, ct := multipartBody(t, parts...)
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Header.Set("Content-Type", ct)
	return r
}

// formAttacks are the spellings of issue 18 item 1 and their variations.
func formAttacks(t *testing.T) []keyAttack {
	x := func(i int) string { return fmt.Sprintf("x%d", i) }
	return []keyAttack{
		{"query victim, multipart body user=x<i>", func(i int) *http.Request {
			return multipartPost(t, http.MethodPost, "/login?user=victim", "user", "", x(i), "password", "", "guess")
		}, true},
		{"query victim, urlencoded body without user", func(i int) *http.Request {
			return formPost("/login?user=victim", "password=guess"+x(i))
		}, false},
		{"query x<i>, urlencoded body user=victim", func(i int) *http.Request {
			return formPost("/login?user="+x(i), "user=victim&password=guess")
		}, true},
		{"urlencoded body user=victim&user=x<i>", func(i int) *http.Request {
			return formPost("/login", "user=victim&user="+x(i)+"&password=guess")
		}, true},
		{"urlencoded body user=x<i>&user=victim", func(i int) *http.Request {
			return formPost("/login", "user="+x(i)+"&user=victim&password=guess")
		}, true},
		{"urlencoded body user=&user=victim", func(i int) *http.Request {
			return formPost("/login?n="+x(i), "user=&user=victim&password=guess")
		}, true},
		{"multipart body user=x<i> then user=victim", func(i int) *http.Request {
			return multipartPost(t, http.MethodPost, "/login", "user", "", x(i), "user", "", "victim")
		}, true},
		{"query user=victim&user=x<i>", func(i int) *http.Request {
			return formPost("/login?user=victim&user="+x(i), "password=guess")
		}, true},
		{"query user=x<i>&user=victim, no body", func(i int) *http.Request {
			return httptest.NewRequest(http.MethodGet, "/login?user="+x(i)+"&user=victim", nil)
		}, true},
		{"form parsed earlier by another middleware", func(i int) *http.Request {
			r := formPost("/login?n="+x(i), "user=victim&password=guess")
			_ = r.ParseForm() // a CSRF check, before the limit
			return r
		}, false},
		{"multipart form parsed earlier by another middleware", func(i int) *http.Request {
			r := multipartPost(t, http.MethodPost, "/login?n="+x(i), "user", "", "victim", "password", "", "guess")
			_ = r.ParseMultipartForm(1 << 20)
			return r
		}, false},
		{"ParseForm earlier on a multipart body", func(i int) *http.Request {
			r := multipartPost(t, http.MethodPost, "/login?n="+x(i), "user", "", "victim", "password", "", "guess")
			_ = r.ParseForm() // reads only the query: the body is still to come
			return r
		}, false},
		{"GET with a multipart body", func(i int) *http.Request {
			return multipartPost(t, http.MethodGet, "/login?n="+x(i), "user", "", "victim")
		}, false},
		// Past the MaxFormBytes read before the handler: counted under
		// the first value, and the handler's parse fails on the other.
		{"multipart body user=x<i>, a 70 KB file, user=victim", func(i int) *http.Request {
			return multipartPost(t, http.MethodPost, "/login", "user", "", x(i), "avatar", "a.png", pastWindow, "user", "", "victim")
		}, false},
		{"multipart body user=, a 70 KB file, user=victim", func(i int) *http.Request {
			return multipartPost(t, http.MethodPost, "/login?n="+x(i), "user", "", "", "avatar", "a.png", pastWindow, "user", "", "victim")
		}, false},
		{"query x<i>, multipart body with a 70 KB file, user=victim", func(i int) *http.Request {
			return multipartPost(t, http.MethodPost, "/login?user="+x(i), "avatar", "a.png", pastWindow, "user", "", "victim")
		}, false},
		{"a middleware set Form", func(i int) *http.Request {
			r := formPost("/login", "user="+x(i)+"&password=guess")
			r.Form = url.Values{"user": {"victim"}}
			return r
		}, true},
	}
}

// errorPolicies are the error policies under which an ambiguous request
// must be refused with 400.
var errorPolicies = []struct {
	name string
	opts []MiddlewareOption
}{
	{"fail closed", nil},
	{"fail open", []MiddlewareOption{WithFailOpen()}},
}

// TestFormKeyAttacks: whichever standard accessor the login handler reads
// the user with, a guess against the victim is counted under the victim
// (so at most guessLimit of them run) or, where the query and the body
// disagree or a field repeats, refused with 400 — never counted under a
// fresh key or the lenient IP fallback. Before the fix, 20 of 20 guesses
// reached the handler in several spellings.
func TestFormKeyAttacks(t *testing.T) {
	form := mustKey(KeyByForm("user"))
	for _, a := range formAttacks(t) {
		for _, acc := range accessors {
			for _, pol := range errorPolicies {
				t.Run(a.name+"/"+acc.name+"/"+pol.name, func(t *testing.T) {
					acted, statuses := loginAttempts(t, form, acc, "user", a, pol.opts...)
					checkAttack(t, a, acted, statuses)
				})
			}
		}
	}
}

// checkAttack asserts the outcome of a's guesses.
func checkAttack(t *testing.T, a keyAttack, acted int, statuses map[int]int) {
	t.Helper()
	if acted > guessLimit {
		t.Errorf("%d of %d guesses against the victim reached the handler; the limit is %d (statuses %v)", acted, guesses, guessLimit, statuses)
	}
	if a.refused && statuses[http.StatusBadRequest] != guesses {
		t.Errorf("statuses %v; want every ambiguous guess refused with 400", statuses)
	}
}

// TestQueryKeyAttacks: KeyByQuery against a handler that reads the field
// with any standard accessor, FormValue included, which prefers a
// URL-encoded body to the query and reads a multipart body on any method.
func TestQueryKeyAttacks(t *testing.T) {
	query := mustKey(KeyByQuery("user"))
	x := func(i int) string { return fmt.Sprintf("x%d", i) }
	attacks := []keyAttack{
		{"query x<i>, urlencoded body user=victim", func(i int) *http.Request {
			return formPost("/login?user="+x(i), "user=victim&password=guess")
		}, true},
		{"no query, urlencoded body user=victim", func(i int) *http.Request {
			return formPost("/login?n="+x(i), "user=victim&password=guess")
		}, true},
		{"no query, GET with a multipart body user=victim", func(i int) *http.Request {
			return multipartPost(t, http.MethodGet, "/login?n="+x(i), "user", "", "victim")
		}, true},
		{"query user=victim&user=x<i>", func(i int) *http.Request {
			return httptest.NewRequest(http.MethodGet, "/login?user=victim&user="+x(i), nil)
		}, true},
		{"query user=&user=victim", func(i int) *http.Request {
			return httptest.NewRequest(http.MethodGet, "/login?n="+x(i)+"&user=&user=victim", nil)
		}, true},
		{"query victim, urlencoded body without user", func(i int) *http.Request {
			return formPost("/login?user=victim", "password=guess"+x(i))
		}, false},
		{"query victim, form parsed earlier", func(i int) *http.Request {
			r := formPost("/login?user=victim", "password=guess"+x(i))
			_ = r.ParseForm()
			return r
		}, false},
	}
	for _, a := range attacks {
		for _, acc := range accessors {
			for _, pol := range errorPolicies {
				t.Run(a.name+"/"+acc.name+"/"+pol.name, func(t *testing.T) {
					acted, statuses := loginAttempts(t, query, acc, "user", a, pol.opts...)
					checkAttack(t, a, acted, statuses)
				})
			}
		}
	}
}

// TestHeaderKeyAttacks: KeyByHeader against a handler that reads another
// line of a repeated header than the first.
func TestHeaderKeyAttacks(t *testing.T) {
	header := mustKey(KeyByHeader("X-User"))
	withLines := func(lines ...string) func(int) *http.Request {
		return func(i int) *http.Request {
			r := httptest.NewRequest(http.MethodPost, fmt.Sprintf("/login?n=%d", i), nil)
			for _, l := range lines {
				r.Header.Add("X-User", strings.ReplaceAll(l, "<i>", fmt.Sprint(i)))
			}
			return r
		}
	}
	attacks := []keyAttack{
		{"x<i> then victim", withLines("x<i>", "victim"), true},
		{"empty then victim", withLines("", "victim"), true},
		{"victim twice", withLines("victim", " victim"), false},
	}
	for _, a := range attacks {
		for _, acc := range headerAccessors {
			for _, pol := range errorPolicies {
				t.Run(a.name+"/"+acc.name+"/"+pol.name, func(t *testing.T) {
					acted, statuses := loginAttempts(t, header, acc, "X-User", a, pol.opts...)
					checkAttack(t, a, acted, statuses)
				})
			}
		}
	}
}

// TestQuerySemicolonAttacks: a service that takes semicolon-separated
// queries wraps its mux in http.AllowQuerySemicolons, and the limit goes
// outermost. Before the fix, "?user=victim;n=<i>" was skipped by
// KeyByQuery and KeyByForm as url.ParseQuery skips it (ErrNoKey: the
// lenient IP policy) while the handler, behind AllowQuerySemicolons,
// read user=victim: 20 of 20 guesses. A query that reads differently
// with semicolons as separators is now ErrAmbiguousKey (400); one that
// reads the same either way is counted as usual, with or without
// AllowQuerySemicolons.
func TestQuerySemicolonAttacks(t *testing.T) {
	x := func(i int) string { return fmt.Sprintf("x%d", i) }
	get := func(q func(i int) string) func(int) *http.Request {
		return func(i int) *http.Request { return httptest.NewRequest(http.MethodGet, "/login?"+q(i), nil) }
	}
	attacks := []keyAttack{
		{"user=victim;n=<i>", get(func(i int) string { return "user=victim;n=" + x(i) }), true},
		{"n=<i>;user=victim", get(func(i int) string { return "n=" + x(i) + ";user=victim" }), true},
		{"user=x<i>&n;user=victim", get(func(i int) string { return "user=" + x(i) + "&n;user=victim" }), true},
		{"user=x<i>;user=victim", get(func(i int) string { return "user=" + x(i) + ";user=victim" }), true},
		{"user=victim&n=1;<i>", get(func(i int) string { return "user=victim&n=1;" + x(i) }), false},
		{"POST user=victim;n=<i>, urlencoded body", func(i int) *http.Request {
			return formPost("/login?user=victim;n="+x(i), "password=guess")
		}, true},
	}
	readers := []accessor{accessors[0], accessors[2], accessors[5], accessors[6]} // FormValue, Form.Get, last of Form, URL.Query
	inners := map[string]func(http.Handler) http.Handler{"AllowQuerySemicolons": http.AllowQuerySemicolons, "plain": nil}
	for kname, key := range map[string]KeyFunc{"KeyByQuery": mustKey(KeyByQuery("user")), "KeyByForm": mustKey(KeyByForm("user"))} {
		for iname, inner := range inners {
			for _, a := range attacks {
				for _, acc := range readers {
					for _, pol := range errorPolicies {
						t.Run(kname+"/"+iname+"/"+a.name+"/"+acc.name+"/"+pol.name, func(t *testing.T) {
							acted, statuses := loginBehind(t, loginSetup{key: key, acc: acc, field: "user", inner: inner}, a, pol.opts...)
							checkAttack(t, a, acted, statuses)
						})
					}
				}
			}
		}
	}
}
