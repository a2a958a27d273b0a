package floodgate

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

const formType = "application/x-www-form-urlencoded"

// formCase is a request to key by a form field, and the expected answer.
type formCase struct {
	name         string
	method       string
	target       string
	ct, body     string
	want         string
	err          error
	skipAccessor bool // the answer is not what the accessors give: see the case
}

func (c formCase) request() *http.Request {
	r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
	if c.ct != "" {
		r.Header.Set("Content-Type", c.ct)
	}
	return r
}

// runFormCases checks kf on each case, the body handed on intact, and
// the answer against every standard accessor of a handler.
func runFormCases(t *testing.T, kf KeyFunc, field string, cases []formCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.request()
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			if errors.Is(err, ErrAmbiguousKey) && errors.Is(err, ErrNoKey) {
				t.Fatalf("%v also wraps ErrNoKey: a selector would fall back", err)
			}
			assertBody(t, r, tc.body)
			if !tc.skipAccessor {
				checkAgainstAccessors(t, tc.request, field, got, err)
			}
		})
	}
}

// checkAgainstAccessors checks a key function's answer (key, err) for the
// request newReq builds against what each standard accessor gives a
// handler of a fresh copy of it, behind http.AllowQuerySemicolons or
// not: a key is the value of every accessor that finds one, and of every
// value in Form, PostForm and the query; "no key" means none of them
// finds a non-empty value.
func checkAgainstAccessors(t testing.TB, newReq func() *http.Request, field, key string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, ErrNoKey) {
		return
	}
	checkAccessorsOf(t, newReq, field, key, err)
	checkAccessorsOf(t, semicolonsSplit(newReq), field, key, err)
}

// semicolonsSplit returns newReq as a handler behind
// http.AllowQuerySemicolons gets its request.
func semicolonsSplit(newReq func() *http.Request) func() *http.Request {
	return func() *http.Request {
		r := newReq()
		r.URL.RawQuery = strings.ReplaceAll(r.URL.RawQuery, ";", "&")
		return r
	}
}

func checkAccessorsOf(t testing.TB, newReq func() *http.Request, field, key string, err error) {
	t.Helper()
	agrees := func(v string) bool { return v == key || v == "" }
	for _, acc := range accessors {
		r := newReq()
		if v := acc.read(r, field); !agrees(v) {
			t.Fatalf("key %q, %v; the handler's %s reads %q", key, err, acc.name, v)
		}
		removeForm(r)
	}
	r := newReq()
	_ = r.ParseMultipartForm(1 << 20)
	defer removeForm(r)
	for _, vs := range [][]string{r.URL.Query()[field], r.Form[field], r.PostForm[field]} {
		for _, v := range vs {
			if v != key {
				t.Fatalf("key %q, %v; the handler finds %q among %q", key, err, v, vs)
			}
		}
	}
}

func removeForm(r *http.Request) {
	if r.MultipartForm != nil {
		_ = r.MultipartForm.RemoveAll()
	}
}

func TestKeyByQuery(t *testing.T) {
	get := func(query string, want string, err error) formCase {
		return formCase{name: query, method: "GET", target: "/?" + query, want: want, err: err}
	}
	mp, mpType := multipartBody(t, "userId", "", "bob")
	runFormCases(t, mustKey(KeyByQuery("userId")), "userId", []formCase{
		get("userId=alice", "alice", nil),
		get("a=1&userId=bob&userId=bob", "bob", nil),
		get("a=1&userId=bob&userId=carol", "", ErrAmbiguousKey),
		get("userId=&userId=carol", "", ErrAmbiguousKey),
		get("userId=a%20b+c", "a b c", nil),
		get("user%49d=dave", "dave", nil),
		get("userId=%zz&userId=eve", "eve", nil),            // malformed pairs skipped, as ParseQuery does
		get("a=1;b=2&userId=frank", "frank", nil),           // semicolons elsewhere: the same reading either way
		get("userId=frank&a=1;userId=frank", "frank", nil),  // the same value either way
		get("userId=x;y&userId=frank", "", ErrAmbiguousKey), // behind AllowQuerySemicolons: x, then frank
		get("userId=frank;n=1", "", ErrAmbiguousKey),        // behind AllowQuerySemicolons: frank; else nothing
		get("n=1;userId=frank", "", ErrAmbiguousKey),
		get("n=1;userId=", "", ErrNoKey), // no key either way
		get("userid=alice", "", ErrNoKey),
		get("userId=", "", ErrNoKey),
		get("userId", "", ErrNoKey),
		get("", "", ErrNoKey),
		{name: "a form body without it", method: "POST", target: "/?userId=alice", ct: formType, body: "x=1", want: "alice"},
		{name: "a form body that agrees", method: "POST", target: "/?userId=alice", ct: formType, body: "userId=alice", want: "alice"},
		{name: "a form body that differs", method: "POST", target: "/?userId=alice", ct: formType, body: "userId=bob", err: ErrAmbiguousKey},
		{name: "only in a form body", method: "POST", target: "/", ct: formType, body: "userId=bob", err: ErrAmbiguousKey},
		{name: "a GET's urlencoded body is not a form", method: "GET", target: "/?userId=alice", ct: formType, body: "userId=bob", want: "alice"},
		{name: "a JSON body is not a form", method: "POST", target: "/?userId=alice", ct: "application/json", body: `{"userId":"bob"}`, want: "alice"},
		{name: "a multipart body that differs", method: "GET", target: "/?userId=alice", ct: mpType, body: mp, err: ErrAmbiguousKey},
		{name: "only in a multipart body", method: "PUT", target: "/", ct: mpType, body: mp, err: ErrAmbiguousKey},
	})
}

func TestKeyByForm(t *testing.T) {
	post := func(name, body, want string, err error) formCase {
		return formCase{name: name, method: "POST", target: "/signup", ct: formType, body: body, want: want, err: err}
	}
	runFormCases(t, mustKey(KeyByForm("nickname")), "nickname", []formCase{
		post("post", "nickname=abc1&x=2", "abc1", nil),
		{name: "charset parameter", method: "PUT", target: "/signup", ct: formType + "; charset=utf-8", body: "nickname=a%2Bb", want: "a+b"},
		{name: "media type in another case", method: "PATCH", target: "/signup", ct: "Application/X-WWW-Form-URLEncoded", body: "nickname=abc1", want: "abc1"},
		{name: "an invalid parameter, as ParseForm", method: "POST", target: "/signup", ct: formType + "; =x", body: "nickname=abc1", want: "abc1"},
		post("repeated, the same value", "nickname=a&nickname=a", "a", nil),
		post("repeated, different values", "nickname=a&nickname=b", "", ErrAmbiguousKey),
		post("an empty value beside another", "nickname=&nickname=b", "", ErrAmbiguousKey),
		post("missing field", "x=1", "", ErrNoKey),
		post("empty field", "nickname=", "", ErrNoKey),
		post("too large", "nickname=abc1&x="+strings.Repeat("a", MaxFormBytes), "", ErrInvalidBody),
		{name: "json body", method: "POST", target: "/signup", ct: "application/json", body: `{"nickname":"abc1"}`, err: ErrNoKey},
		{name: "no content type", method: "POST", target: "/signup", body: "nickname=abc1", err: ErrNoKey},
		{name: "a GET's body is not read", method: "GET", target: "/signup", ct: formType, body: "nickname=abc1", err: ErrNoKey},
		// The query is part of the form: FormValue falls back to it.
		{name: "query only", method: "GET", target: "/signup?nickname=q1", want: "q1"},
		{name: "query, body without it", method: "POST", target: "/signup?nickname=q1", ct: formType, body: "x=1", want: "q1"},
		{name: "query and body agree", method: "POST", target: "/signup?nickname=q1", ct: formType, body: "nickname=q1", want: "q1"},
		{name: "query and body differ", method: "POST", target: "/signup?nickname=q1", ct: formType, body: "nickname=abc1", err: ErrAmbiguousKey},
		{name: "empty query, body", method: "POST", target: "/signup?nickname=", ct: formType, body: "nickname=abc1", err: ErrAmbiguousKey},
		{name: "a GET's body beside the query", method: "GET", target: "/signup?nickname=q1", ct: formType, body: "nickname=abc1", want: "q1"},
	})
}

// multipartBody builds a multipart/form-data body from parts given as
// name, filename, content triples (an empty filename makes a value).
func multipartBody(t testing.TB, parts ...string) (body, contentType string) {
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
// the handler's accessors give, and the handler still parses every field
// and file of the body afterwards.
func TestKeyByFormMultipart(t *testing.T) {
	kf := mustKey(KeyByForm("nickname"))
	big := strings.Repeat("x", 2*MaxFormBytes)
	tests := []struct {
		name   string
		method string
		target string
		parts  []string
		want   string
		err    error
	}{
		{"one field", "POST", "/signup", []string{"nickname", "", "abc1"}, "abc1", nil},
		{"among others", "POST", "/signup", []string{"email", "", "a@example.com", "nickname", "", "abc2", "x", "", "y"}, "abc2", nil},
		{"repeated, the same value", "PUT", "/signup", []string{"nickname", "", "abc3", "nickname", "", "abc3"}, "abc3", nil},
		{"repeated, different values", "PUT", "/signup", []string{"nickname", "", "abc3", "nickname", "", "other"}, "", ErrAmbiguousKey},
		{"a file of that name is not a value", "POST", "/signup", []string{"nickname", "n.txt", "file", "nickname", "", "abc4"}, "abc4", nil},
		{"field before a large file", "POST", "/signup", []string{"nickname", "", "abc5", "avatar", "a.png", big}, "abc5", nil},
		{"any method, as ParseMultipartForm", "GET", "/signup", []string{"nickname", "", "abc6"}, "abc6", nil},
		{"utf-8 value", "POST", "/signup", []string{"nickname", "", "닉네임7"}, "닉네임7", nil},
		{"the query agrees", "POST", "/signup?nickname=abc8", []string{"nickname", "", "abc8"}, "abc8", nil},
		{"the query differs", "POST", "/signup?nickname=victim", []string{"nickname", "", "abc8"}, "", ErrAmbiguousKey},
		{"the query alone", "POST", "/signup?nickname=abc9", []string{"email", "", "a@example.com"}, "abc9", nil},
		{"missing", "POST", "/signup", []string{"email", "", "a@example.com"}, "", ErrNoKey},
		{"empty value", "POST", "/signup", []string{"nickname", "", ""}, "", ErrNoKey},
		{"only a file", "POST", "/signup", []string{"nickname", "n.txt", "abc"}, "", ErrNoKey},
		{"field beyond the limit", "POST", "/signup", []string{"avatar", "a.png", big, "nickname", "", "abc8"}, "", ErrInvalidBody},
		{"field beyond the limit, the query has one", "POST", "/signup?nickname=abc8", []string{"avatar", "a.png", big, "nickname", "", "abc8"}, "abc8", nil},
		{"the field, a large file, the field again", "POST", "/signup", []string{"nickname", "", "abc9", "avatar", "a.png", big, "nickname", "", "abc9"}, "abc9", nil},
		{"value larger than the limit", "POST", "/signup", []string{"nickname", "", big}, "", ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := multipartBody(t, tc.parts...)
			c := formCase{method: tc.method, target: tc.target, ct: ct, body: body}
			r := c.request()
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			checkAgainstAccessors(t, c.request, "nickname", got, err)
			checkWholeMultipart(t, r, tc.parts, len(big))
		})
	}
}

// checkWholeMultipart checks that r's handler, after the key function,
// parses every field and file of the body built from parts.
func checkWholeMultipart(t *testing.T, r *http.Request, parts []string, bigSize int) {
	t.Helper()
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		t.Fatalf("handler's ParseMultipartForm: %v", err)
	}
	defer removeForm(r)
	values, files := 0, 0
	for i := 0; i+2 < len(parts); i += 3 {
		if parts[i+1] == "" {
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
			if fh.Size != int64(bigSize) && fh.Size != 4 && fh.Size != 3 {
				t.Errorf("file %s: %d bytes", fh.Filename, fh.Size)
			}
		}
	}
	if gotValues != values || gotFiles != files {
		t.Fatalf("handler saw %d values and %d files; want %d and %d", gotValues, gotFiles, values, files)
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

// TestKeyByFormParsedEarlier: a form another middleware parsed before the
// limit is read where the handler will read it, not from the consumed
// body; and a body it left unparsed (ParseForm on a multipart body) is
// still read.
func TestKeyByFormParsedEarlier(t *testing.T) {
	kf := mustKey(KeyByForm("user"))
	mp, mpType := multipartBody(t, "user", "", "victim")
	tests := []struct {
		name  string
		c     formCase
		parse func(*http.Request)
		want  string
		err   error
	}{
		{"ParseForm", formCase{method: "POST", target: "/login", ct: formType, body: "user=victim"},
			func(r *http.Request) { _ = r.ParseForm() }, "victim", nil},
		{"FormValue", formCase{method: "POST", target: "/login", ct: formType, body: "user=victim"},
			func(r *http.Request) { _ = r.FormValue("csrf") }, "victim", nil},
		{"ParseMultipartForm", formCase{method: "POST", target: "/login", ct: mpType, body: mp},
			func(r *http.Request) { _ = r.ParseMultipartForm(1 << 20) }, "victim", nil},
		{"ParseForm on a multipart body", formCase{method: "POST", target: "/login", ct: mpType, body: mp},
			func(r *http.Request) { _ = r.ParseForm() }, "victim", nil},
		{"ParseForm, then the query differs", formCase{method: "POST", target: "/login?user=x1", ct: formType, body: "user=victim"},
			func(r *http.Request) { _ = r.ParseForm() }, "", ErrAmbiguousKey},
		{"ParseMultipartForm, then the query differs", formCase{method: "POST", target: "/login?user=x1", ct: mpType, body: mp},
			func(r *http.Request) { _ = r.ParseMultipartForm(1 << 20) }, "", ErrAmbiguousKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			newReq := func() *http.Request {
				r := tc.c.request()
				tc.parse(r)
				return r
			}
			r := newReq()
			defer removeForm(r)
			got, err := kf(r)
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("key = %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
			checkAgainstAccessors(t, newReq, "user", got, err)
		})
	}
}

func assertBody(t *testing.T, r *http.Request, want string) {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil || string(b) != want {
		t.Fatalf("body after the key function: %d bytes, %v; want the original %d bytes", len(b), err, len(want))
	}
}

// resettableBody is a request body a benchmark rewinds between
// iterations without allocating.
type resettableBody struct{ bytes.Reader }

func (*resettableBody) Close() error { return nil }

// BenchmarkFormKeys: what the agreement checks cost an honest request,
// beside what its handler spends reading the same field (the baseline
// of each pair).
func BenchmarkFormKeys(b *testing.B) {
	mp, mpType := multipartBody(b, "email", "", "ann@example.com", "user", "", "ann", "password", "", "correct horse")
	benches := []struct {
		name   string
		method string
		target string
		ct     string
		body   string
		header string
		read   func(*http.Request) (string, error)
	}{
		{"KeyByQuery/GET", "GET", "/?a=1&user=ann&b=2", "", "", "", mustKey(KeyByQuery("user"))},
		{"URL.Query().Get/GET", "GET", "/?a=1&user=ann&b=2", "", "", "", func(r *http.Request) (string, error) { return r.URL.Query().Get("user"), nil }},
		{"KeyByForm/urlencoded", "POST", "/login", formType, "email=ann%40example.com&user=ann&password=correct+horse", "", mustKey(KeyByForm("user"))},
		{"PostFormValue/urlencoded", "POST", "/login", formType, "email=ann%40example.com&user=ann&password=correct+horse", "", func(r *http.Request) (string, error) { return r.PostFormValue("user"), nil }},
		{"KeyByForm/multipart", "POST", "/login", mpType, mp, "", mustKey(KeyByForm("user"))},
		{"PostFormValue/multipart", "POST", "/login", mpType, mp, "", func(r *http.Request) (string, error) { return r.PostFormValue("user"), nil }},
		{"KeyByHeader", "GET", "/", "", "", "ann", mustKey(KeyByHeader("X-User"))},
		{"Header.Get", "GET", "/", "", "", "ann", func(r *http.Request) (string, error) { return r.Header.Get("X-User"), nil }},
	}
	for _, bc := range benches {
		b.Run(bc.name, func(b *testing.B) {
			r := httptest.NewRequest(bc.method, bc.target, nil)
			if bc.ct != "" {
				r.Header.Set("Content-Type", bc.ct)
			}
			if bc.header != "" {
				r.Header.Set("X-User", bc.header)
			}
			body := new(resettableBody)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				body.Reset([]byte(bc.body))
				r.Body, r.Form, r.PostForm, r.MultipartForm = body, nil, nil, nil
				if k, err := bc.read(r); k != "ann" || err != nil {
					b.Fatalf("key %q, %v", k, err)
				}
			}
		})
	}
}

// TestQueryManyPairs: a query or URL-encoded body of many pairs is keyed
// by what url.ParseQuery gives the handler. Since Go 1.24 it drops every
// value of a query over its limit on the number of pairs (10,000 by
// default): the key was the value all the same, counting under a fresh
// key each time a request its handler serves as giving none. Where that
// limit falls between the reading with semicolons as separators and the
// one without, the request is ambiguous.
func TestQueryManyPairs(t *testing.T) {
	first := func(q string) string {
		vals, _ := url.ParseQuery(q)
		return vals.Get("user")
	}
	for _, pairs := range []int{manyPairs - 1, manyPairs + 1, 9999, 10000, 10001, 20000} {
		q := "user=x1" + strings.Repeat("&a=1", pairs-1)
		for name, c := range map[string]formCase{
			"query":      {method: "GET", target: "/?" + q},
			"form body":  {method: "POST", target: "/?n=1", ct: formType, body: q},
			"semicolons": {method: "GET", target: "/?n;1&" + q},
		} {
			if len(c.body) > MaxFormBytes {
				continue
			}
			r := c.request()
			want, wantErr := first(r.URL.RawQuery)+first(c.body), error(nil)
			switch {
			case first(r.URL.RawQuery) != first(strings.ReplaceAll(r.URL.RawQuery, ";", "&")):
				want, wantErr = "", ErrAmbiguousKey
			case want == "":
				wantErr = ErrNoKey
			}
			got, err := mustKey(KeyByForm("user"))(r)
			if got != want || !errors.Is(err, wantErr) || (err == nil) != (wantErr == nil) {
				t.Errorf("%d pairs, %s: %q, %v; want %q, %v", pairs, name, got, err, want, wantErr)
			}
		}
	}
}
