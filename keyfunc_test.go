package floodgate

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
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
		{"first line", []string{"X-Api-Key", "k1", "X-Api-Key", "k2"}, "k1", nil},
		{"missing", nil, "", ErrNoKey},
		{"empty", []string{"X-Api-Key", " "}, "", ErrNoKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kf(ipReq(direct, tc.headers...))
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestKeyByQuery(t *testing.T) {
	kf := mustKey(KeyByQuery("userId"))
	tests := []struct {
		query string
		want  string
		err   error
	}{
		{"userId=alice", "alice", nil},
		{"a=1&userId=bob&userId=carol", "bob", nil},
		{"userId=a%20b+c", "a b c", nil},
		{"user%49d=dave", "dave", nil},
		{"userId=%zz&userId=eve", "eve", nil}, // malformed pairs skipped, as ParseQuery does
		{"userId=x;y&userId=frank", "frank", nil},
		{"userid=alice", "", ErrNoKey},
		{"userId=", "", ErrNoKey},
		{"userId", "", ErrNoKey},
		{"", "", ErrNoKey},
	}
	for _, tc := range tests {
		r := httptest.NewRequest(http.MethodGet, "/?"+tc.query, nil)
		got, err := kf(r)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("%q: key = %q, %v; want %q, %v", tc.query, got, err, tc.want, tc.err)
		}
		if tc.err == nil && got != r.URL.Query().Get("userId") {
			t.Errorf("%q: key %q differs from URL.Query().Get", tc.query, got)
		}
	}
}

func TestKeyByForm(t *testing.T) {
	const form = "application/x-www-form-urlencoded"
	kf := mustKey(KeyByForm("nickname"))
	tests := []struct {
		name       string
		method, ct string
		body       string
		want       string
		err        error
	}{
		{"post", "POST", form, "nickname=abc1&x=2", "abc1", nil},
		{"charset parameter", "PUT", form + "; charset=utf-8", "nickname=a%2Bb", "a+b", nil},
		{"first value", "PATCH", form, "nickname=a&nickname=b", "a", nil},
		{"missing field", "POST", form, "x=1", "", ErrNoKey},
		{"empty field", "POST", form, "nickname=", "", ErrNoKey},
		{"json body", "POST", "application/json", `{"nickname":"abc1"}`, "", ErrNoKey},
		{"get", "GET", form, "nickname=abc1", "", ErrNoKey},
		{"too large", "POST", form, "nickname=abc1&x=" + strings.Repeat("a", MaxFormBytes), "", ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/signup?nickname=query", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.ct)
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if tc.err == nil {
				if v := r.PostFormValue("nickname"); v != got {
					t.Fatalf("handler's PostFormValue = %q; key %q", v, got)
				}
				return
			}
			assertBody(t, r, tc.body)
		})
	}
}

// assertBody checks that the handler can still read the whole body.
// multipartBody builds a multipart/form-data body from parts given as
// name, filename, content triples (an empty filename makes a value).
func multipartBody(t *testing.T, parts ...string) (body, contentType string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+2 < len(parts); i += 3 {
		var pw io.Writer
		var err error
		if parts[i+1] == "" {
			pw, err = w.CreateFormField(parts[i])
		} else {
			pw, err = w.CreateFormFile(parts[i], parts[i+1])
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, parts[i+2])
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String(), w.FormDataContentType()
}

// TestKeyByFormMultipart: a multipart/form-data body is keyed by the value
// PostFormValue gives the handler, and the handler still parses every
// field and file of the body afterwards.
func TestKeyByFormMultipart(t *testing.T) {
	kf := mustKey(KeyByForm("nickname"))
	big := strings.Repeat("x", 2*MaxFormBytes)
	tests := []struct {
		name   string
		method string
		parts  []string
		want   string
		err    error
	}{
		{"one field", "POST", []string{"nickname", "", "abc1"}, "abc1", nil},
		{"among others", "POST", []string{"email", "", "a@example.com", "nickname", "", "abc2", "x", "", "y"}, "abc2", nil},
		{"first value wins", "PUT", []string{"nickname", "", "abc3", "nickname", "", "other"}, "abc3", nil},
		{"a file of that name is not a value", "POST", []string{"nickname", "n.txt", "file", "nickname", "", "abc4"}, "abc4", nil},
		{"field before a large file", "POST", []string{"nickname", "", "abc5", "avatar", "a.png", big}, "abc5", nil},
		{"any method, as PostFormValue", "GET", []string{"nickname", "", "abc6"}, "abc6", nil},
		{"utf-8 value", "POST", []string{"nickname", "", "닉네임7"}, "닉네임7", nil},
		{"missing", "POST", []string{"email", "", "a@example.com"}, "", ErrNoKey},
		{"empty value", "POST", []string{"nickname", "", ""}, "", ErrNoKey},
		{"only a file", "POST", []string{"nickname", "n.txt", "abc"}, "", ErrNoKey},
		{"field beyond the limit", "POST", []string{"avatar", "a.png", big, "nickname", "", "abc8"}, "", ErrInvalidBody},
		{"value larger than the limit", "POST", []string{"nickname", "", big}, "", ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := multipartBody(t, tc.parts...)
			r := httptest.NewRequest(tc.method, "/signup?nickname=query", strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			// The handler parses the whole body: every field and file.
			if err := r.ParseMultipartForm(32 << 20); err != nil {
				t.Fatalf("handler's ParseMultipartForm: %v", err)
			}
			defer r.MultipartForm.RemoveAll()
			if tc.err == nil {
				if v := r.PostFormValue("nickname"); v != got {
					t.Fatalf("handler's PostFormValue = %q; key %q", v, got)
				}
			}
			values, files := 0, 0
			for i := 0; i+2 < len(tc.parts); i += 3 {
				if tc.parts[i+1] == "" {
					values++
				} else {
					files++
				}
			}
			gotValues, gotFiles := 0, 0
			for _, v := range r.MultipartForm.Value {
				gotValues += len(v)
			}
			for _, f := range r.MultipartForm.File {
				for _, fh := range f {
					gotFiles++
					if fh.Size != int64(len(big)) && fh.Size != 4 && fh.Size != 3 {
						t.Errorf("file %s: %d bytes", fh.Filename, fh.Size)
					}
				}
			}
			if gotValues != values || gotFiles != files {
				t.Fatalf("handler saw %d values and %d files; want %d and %d", gotValues, gotFiles, values, files)
			}
		})
	}
}

// TestKeyByFormMultipartMalformed: a broken multipart body is the
// client's error (ErrInvalidBody), never a fall back to a weaker policy,
// and the handler still gets the body as sent.
func TestKeyByFormMultipartMalformed(t *testing.T) {
	kf := mustKey(KeyByForm("nickname"))
	for name, c := range map[string]struct{ ct, body string }{
		"no closing boundary": {"multipart/form-data; boundary=XX", "--XX\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1"},
		"no boundary":         {"multipart/form-data", "--XX\r\n"},
		"garbage":             {"multipart/form-data; boundary=XX", "garbage"},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
		r.Header.Set("Content-Type", c.ct)
		if k, err := kf(r); !errors.Is(err, ErrInvalidBody) {
			t.Errorf("%s: key = %q, %v; want ErrInvalidBody", name, k, err)
		}
		assertBody(t, r, c.body)
	}
}

func assertBody(t *testing.T, r *http.Request, want string) {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil || string(b) != want {
		t.Fatalf("body after the key function: %d bytes, %v; want the original %d bytes", len(b), err, len(want))
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
