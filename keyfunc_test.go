package floodgate

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestKeyByHeader(t *testing.T) {
	kf := mustKey(KeyByHeader("x-api-key"))
	tests := []struct {
		name    string
		headers []string
		want    string
		err     error
	}{
		{"present", []string{"X-Api-Key", "k1"}, "k1", nil},
		{"trimmed", []string{"X-Api-Key", "  k1 "}, "k1", nil},
		{"same value on two lines", []string{"X-Api-Key", "k1", "X-Api-Key", " k1"}, "k1", nil},
		{"lines that differ", []string{"X-Api-Key", "k1", "X-Api-Key", "k2"}, "", ErrAmbiguousKey},
		{"an empty line first", []string{"X-Api-Key", "", "X-Api-Key", "k2"}, "", ErrAmbiguousKey},
		{"an empty line last", []string{"X-Api-Key", "k1", "X-Api-Key", " "}, "", ErrAmbiguousKey},
		{"commas are one value", []string{"X-Api-Key", "k1, k2"}, "k1, k2", nil},
		{"missing", nil, "", ErrNoKey},
		{"empty", []string{"X-Api-Key", " "}, "", ErrNoKey},
		{"empty twice", []string{"X-Api-Key", " ", "X-Api-Key", ""}, "", ErrNoKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ipReq(direct, tc.headers...)
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if errors.Is(err, ErrAmbiguousKey) && errors.Is(err, ErrNoKey) {
				t.Fatalf("%v also wraps ErrNoKey: a selector would fall back", err)
			}
			// A server trims the white space around a value as it reads
			// the line; a request built in a test keeps it.
			if v := strings.TrimSpace(r.Header.Get("X-Api-Key")); err == nil && v != got {
				t.Fatalf("key %q; the handler's Header.Get is %q", got, v)
			}
		})
	}
}

func TestKeyByJSONField(t *testing.T) {
	kf := mustKey(KeyByJSONField("nickname", 64))
	tests := []struct {
		name string
		body string
		want string
		err  error
	}{
		{"string field", `{"nickname":"abc1","age":3}`, "abc1", nil},
		{"nested values skipped", `{"a":{"nickname":"x"},"b":[1,{"c":null}],"nickname":"abc2"}`, "abc2", nil},
		{"case-insensitive like encoding/json", `{"NickName":"abc3"}`, "abc3", nil},
		{"escapes decoded", `{"nickname":"a\u0062c"}`, "abc", nil},
		{"white space around", " \n{\"nickname\" : \"abc4\"}\n ", "abc4", nil},
		{"missing", `{"name":"abc1"}`, "", ErrNoKey},
		{"null", `{"nickname":null}`, "", ErrNoKey},
		{"number", `{"nickname":123}`, "", ErrNoKey},
		{"empty string", `{"nickname":""}`, "", ErrNoKey},
		{"empty body", "", "", ErrNoKey},
		{"repeated", `{"nickname":"a1","nickname":"b1"}`, "", ErrInvalidBody},
		{"repeated in another case", `{"nickname":"x1","NICKNAME":"abc7"}`, "", ErrInvalidBody},
		{"repeated with the Kelvin sign, which encoding/json folds to k", "{\"nickname\":\"x1\",\"nic\u212aname\":\"abc7\"}", "", ErrInvalidBody},
		{"not an object", `["nickname","abc1"]`, "", ErrInvalidBody},
		{"invalid", `{"nickname":"abc1"`, "", ErrInvalidBody},
		{"trailing data", `{"nickname":"abc1"} {}`, "", ErrInvalidBody},
		{"too large", `{"nickname":"abc1","pad":"` + strings.Repeat("x", 64) + `"}`, "", ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(tc.body))
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			assertBody(t, r, tc.body)
		})
	}
}

// closeRecorder is a body that records being closed.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestKeyByJSONFieldBodyHandedOn(t *testing.T) {
	body := `{"nickname":"abc1"}` + strings.Repeat(" ", 1000)
	orig := &closeRecorder{Reader: strings.NewReader(body)}
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body = orig
	if _, err := mustKey(KeyByJSONField("nickname", 100))(r); !errors.Is(err, ErrInvalidBody) {
		t.Fatalf("err = %v; want ErrInvalidBody for a body over the bound", err)
	}
	assertBody(t, r, body)
	if err := r.Body.Close(); err != nil || !orig.closed {
		t.Fatalf("Close = %v, original closed %v", err, orig.closed)
	}
	// No body at all.
	r = httptest.NewRequest(http.MethodPost, "/", nil)
	if _, err := mustKey(KeyByJSONField("nickname", 100))(r); !errors.Is(err, ErrNoKey) {
		t.Fatalf("no body: err = %v; want ErrNoKey", err)
	}
}

// failingReader returns some bytes, then an error.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset")
	}
	p[0] = '{'
	f.n--
	return 1, nil
}

func TestKeyByJSONFieldReadError(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", io.NopCloser(&failingReader{n: 3}))
	if _, err := mustKey(KeyByJSONField("nickname", 100))(r); !errors.Is(err, ErrInvalidBody) || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("err = %v; want ErrInvalidBody with the cause", err)
	}
	b, err := io.ReadAll(r.Body)
	if string(b) != "{{{" || err == nil {
		t.Fatalf("handler reads %q, %v; want the bytes read and then the error", b, err)
	}
}

func TestKeyByRoutePattern(t *testing.T) {
	kf := KeyByRoutePattern()
	mux := http.NewServeMux()
	var keys []string
	mux.HandleFunc("GET /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, err := kf(r)
		if err != nil {
			t.Errorf("key: %v", err)
		}
		keys = append(keys, k)
	})
	for _, p := range []string{"/users/1", "/users/2", "/users/999"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, p, nil))
	}
	if strings.Join(keys, "|") != "GET /users/{id}|GET /users/{id}|GET /users/{id}" {
		t.Fatalf("keys = %q; want the pattern for every path", keys)
	}
	// Wrapping the mux instead of its handlers is a misconfiguration, not
	// a request without a key: it must not fall to a weaker policy, and
	// the error must say how to fix it.
	_, err := kf(httptest.NewRequest(http.MethodGet, "/users/1", nil))
	if !errors.Is(err, ErrInvalidOption) || errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "wrap the handlers registered on the ServeMux") {
		t.Fatalf("outside the mux: err = %v; want ErrInvalidOption naming the fix", err)
	}
}

func TestKeyByMethod(t *testing.T) {
	kf := KeyByMethod()
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	if k, err := kf(r); k != "POST" || err != nil {
		t.Fatalf("key = %q, %v", k, err)
	}
	r.Method = ""
	if k, err := kf(r); k != "GET" || err != nil {
		t.Fatalf("empty method: key = %q, %v; want GET", k, err)
	}
}

func constKey(k string) KeyFunc {
	return func(*http.Request) (string, error) { return k, nil }
}

func TestJoinKeys(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	join := func(parts ...string) string {
		fns := make([]KeyFunc, len(parts))
		for i, p := range parts {
			fns[i] = constKey(p)
		}
		k, err := mustKey(JoinKeys(fns...))(r)
		if err != nil {
			t.Fatalf("JoinKeys(%q): %v", parts, err)
		}
		return k
	}
	if k := join("POST", "/signup", "192.0.2.1"); k != "4:POST7:/signup9:192.0.2.1" {
		t.Fatalf("key = %q", k)
	}
	// Components that would collide under a plain separator do not.
	collide := [][2][]string{
		{{"a:b", "c"}, {"a", "b:c"}},
		{{"a|b", "c"}, {"a", "b|c"}},
		{{"1:a", ""}, {"", "1:a"}},
		{{"", ""}, {""}},
		{{"ab"}, {"a", "b"}},
		{{"3:abc"}, {"abc"}},
	}
	for _, c := range collide {
		if x, y := join(c[0]...), join(c[1]...); x == y {
			t.Errorf("%q and %q join to the same key %q", c[0], c[1], x)
		}
	}
	// Errors are passed on, still recognizable.
	_, err := mustKey(JoinKeys(KeyByMethod(), mustKey(KeyByHeader("X-Missing"))))(r)
	if !errors.Is(err, ErrNoKey) {
		t.Fatalf("err = %v; want ErrNoKey", err)
	}
}

// mustKey returns kf, or panics (failing the test) with err: the key
// functions of these tests are built from constant arguments, as
// regexp.MustCompile's patterns are.
func mustKey(kf KeyFunc, err error) KeyFunc {
	if err != nil {
		panic(err)
	}
	return kf
}

// invalidKeyArgs builds key functions from invalid arguments, each with the
// constructor the error must name and a word of the fix it must give.
func invalidKeyArgs() []struct {
	name, constructor, fix string
	build                  func() (KeyFunc, error)
} {
	return []struct {
		name, constructor, fix string
		build                  func() (KeyFunc, error)
	}{
		{"KeyByHeader empty", "KeyByHeader", "X-API-Key", func() (KeyFunc, error) { return KeyByHeader("") }},
		{"KeyByHeader invalid", "KeyByHeader", "X-API-Key", func() (KeyFunc, error) { return KeyByHeader("X Y") }},
		{"KeyByQuery empty", "KeyByQuery", "pass the name", func() (KeyFunc, error) { return KeyByQuery("") }},
		{"KeyByForm empty", "KeyByForm", "pass the name", func() (KeyFunc, error) { return KeyByForm("") }},
		{"KeyByJSONField empty", "KeyByJSONField", "pass the name", func() (KeyFunc, error) { return KeyByJSONField("", 10) }},
		{"KeyByJSONField zero max", "KeyByJSONField", "largest body", func() (KeyFunc, error) { return KeyByJSONField("a", 0) }},
		{"KeyByJSONField negative max", "KeyByJSONField", "largest body", func() (KeyFunc, error) { return KeyByJSONField("a", -1) }},
		{"JoinKeys none", "JoinKeys", "pass the key functions", func() (KeyFunc, error) { return JoinKeys() }},
		{"JoinKeys nil", "JoinKeys", "check the error", func() (KeyFunc, error) { return JoinKeys(KeyByMethod(), nil) }},
		{"KeyByPattern nil", "KeyByPattern", "check the error", func() (KeyFunc, error) { return KeyByPattern(nil) }},
	}
}

// TestKeyFuncConstructorErrors: every key function constructor given an
// invalid argument returns no KeyFunc and an error wrapping
// ErrInvalidOption that names the constructor and the fix.
func TestKeyFuncConstructorErrors(t *testing.T) {
	for _, tc := range invalidKeyArgs() {
		kf, err := tc.build()
		if kf != nil || !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: KeyFunc %v, error %v; want nil and ErrInvalidOption", tc.name, kf != nil, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.constructor+":") || !strings.Contains(msg, tc.fix) {
			t.Errorf("%s: %q does not name %s and the fix (%q)", tc.name, msg, tc.constructor, tc.fix)
		}
	}
}

// TestIgnoredKeyFuncErrorRefused: a KeyFunc whose constructor's error was
// ignored is nil, and everything that takes a KeyFunc refuses it at
// construction with ErrInvalidOption, instead of failing every request.
func TestIgnoredKeyFuncErrorRefused(t *testing.T) {
	lim, err := NewTokenBucket(Rate{Limit: 1, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range invalidKeyArgs() {
		kf, _ := tc.build() // the mistake under test
		if mw, err := NewMiddleware(lim, WithKeyFunc(kf)); !errors.Is(err, ErrInvalidOption) || mw != nil {
			t.Errorf("NewMiddleware with %s: %v; want ErrInvalidOption", tc.name, err)
		}
		sel, err := NewPolicySelector(
			Policy{Name: "nickname", Limiter: lim, Key: kf},
			Policy{Name: "ip", Limiter: lim, Key: KeyByMethod()},
		)
		if !errors.Is(err, ErrInvalidOption) || sel != nil || !strings.Contains(err.Error(), `"nickname"`) {
			t.Errorf("NewPolicySelector with %s: %v; want ErrInvalidOption naming the policy", tc.name, err)
		}
		if j, err := JoinKeys(KeyByMethod(), kf); !errors.Is(err, ErrInvalidOption) || j != nil {
			t.Errorf("JoinKeys with %s: %v; want ErrInvalidOption", tc.name, err)
		}
		if p, err := KeyByPattern(kf); !errors.Is(err, ErrInvalidOption) || p != nil {
			t.Errorf("KeyByPattern of %s: %v; want ErrInvalidOption", tc.name, err)
		}
	}
}
