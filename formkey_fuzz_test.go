package floodgate

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// fuzzFormKinds are the requests FuzzFormKeys sends: a method and a
// Content-Type.
var fuzzFormKinds = []struct{ method, ct string }{
	{http.MethodPost, formType},
	{http.MethodPost, "multipart/form-data; boundary=XX"},
	{http.MethodGet, "multipart/form-data; boundary=XX"},
	{http.MethodGet, formType},
	{http.MethodPatch, ""},
	{http.MethodPut, "MULTIPART/Form-Data; boundary=\"XX\""},
}

// fuzzFormParses are what a middleware before the limit may have done.
var fuzzFormParses = []func(*http.Request){
	func(*http.Request) {},
	func(r *http.Request) { _ = r.ParseForm() },
	func(r *http.Request) { _ = r.ParseMultipartForm(1 << 20) },
	func(r *http.Request) { _ = r.FormValue("csrf") },
}

// FuzzFormKeys: whatever the query, the body, the media type and what a
// middleware parsed before, KeyByForm and KeyByQuery agree with the
// standard accessors of the handler that runs after them (FormValue,
// PostFormValue, Form, PostForm, URL.Query), behind
// http.AllowQuerySemicolons or not: a key is the value each of them
// reads, if it reads one; "no key" means none reads a value; an
// ambiguity is refused only where the accessors do see different values
// (or, for KeyByQuery, a value outside the query), or other values
// behind AllowQuerySemicolons; an invalid body only where
// ParseMultipartForm fails too. The handler gets the body intact.
func FuzzFormKeys(f *testing.F) {
	mp := "--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nabc1\r\n--XX--\r\n"
	f.Add("user=abc1", []byte("user=abc1"), uint8(0), uint8(0))
	f.Add("user=victim", []byte(mp), uint8(1), uint8(0))
	f.Add("user=victim", []byte("password=x"), uint8(0), uint8(1))
	f.Add("", []byte(mp), uint8(2), uint8(2))
	f.Add("user=a&user=b", []byte(""), uint8(3), uint8(3))
	f.Add("user=%zz&user=", []byte("user=&user=a;b"), uint8(0), uint8(0))
	f.Add("", []byte("--XX\r\nContent-Disposition: form-data; name=\"user\"; filename=\"a\"\r\n\r\nf\r\n--XX\r\nContent-Disposition: form-data; name=\"user\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nab=3Dc\r\n--XX--\r\n"), uint8(5), uint8(1))
	f.Add("", []byte("--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\na\r\n--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nb\r\n--XX--\r\n"), uint8(1), uint8(0))
	f.Add("user=victim;n=1", []byte("user=victim"), uint8(0), uint8(0))
	f.Add("n;1&user=x1", []byte("--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nx1\r\n--XX--\r\n"), uint8(1), uint8(0))
	f.Add("n=1", []byte("preamble\r\n--XX\r\nContent-Disposition: form-data; name=user\r\n\r\n\r\n--XX--\r\nepilogue"), uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, query string, body []byte, kind, parse uint8) {
		k := fuzzFormKinds[int(kind)%len(fuzzFormKinds)]
		before := fuzzFormParses[int(parse)%len(fuzzFormParses)]
		newReq := func() *http.Request {
			r := httptest.NewRequest(k.method, "/", bytes.NewReader(body))
			r.URL.RawQuery = query
			if k.ct != "" {
				r.Header.Set("Content-Type", k.ct)
			}
			before(r)
			return r
		}
		for name, kf := range map[string]KeyFunc{"form": mustKey(KeyByForm("user")), "query": mustKey(KeyByQuery("user"))} {
			r := newReq()
			key, err := kf(r)
			checkBodyHandedOn(t, r, newReq)
			removeForm(r)
			switch {
			case err == nil, errors.Is(err, ErrNoKey):
				checkAgainstAccessors(t, newReq, "user", key, err)
			case errors.Is(err, ErrAmbiguousKey):
				checkAmbiguous(t, newReq, name == "query", err)
			case errors.Is(err, ErrInvalidBody):
				checkInvalid(t, newReq, err)
			default:
				t.Fatalf("%s: undocumented error %v", name, err)
			}
		}
	})
}

// checkBodyHandedOn: the body left after the key function is what the
// handler would have had without it.
func checkBodyHandedOn(t *testing.T, r *http.Request, newReq func() *http.Request) {
	t.Helper()
	got, err := io.ReadAll(r.Body)
	want, _ := io.ReadAll(newReq().Body)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("handler reads %q, %v; want %q", got, err, want)
	}
}

// parsedValues returns every value of field a handler of a fresh request
// can read, and the query's; ok is false if the handler cannot parse its
// form.
func parsedValues(newReq func() *http.Request, field string) (all, query []string, ok bool) {
	r := newReq()
	defer removeForm(r)
	if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		return nil, nil, false
	}
	query = r.URL.Query()[field]
	all = append(append(append([]string(nil), query...), r.Form[field]...), r.PostForm[field]...)
	return all, query, true
}

// checkAmbiguous: the handler does see different values (or, for
// KeyByQuery, a value that is not in the query), or sees another value
// behind http.AllowQuerySemicolons than without it.
func checkAmbiguous(t *testing.T, newReq func() *http.Request, queryOnly bool, err error) {
	t.Helper()
	all, query, ok := parsedValues(newReq, "user")
	split, _, splitOK := parsedValues(semicolonsSplit(newReq), "user")
	if !ok || !splitOK {
		return // the handler cannot parse the form: any refusal is safe
	}
	if !oneValue(all) || !oneValue(split) || firstOf(all) != firstOf(split) {
		return
	}
	if queryOnly && len(query) == 0 && len(all) > 0 {
		return
	}
	t.Fatalf("%v, but the handler reads only %q (%q behind AllowQuerySemicolons)", err, all, split)
}

// oneValue reports whether vals hold at most one distinct value.
func oneValue(vals []string) bool {
	for _, v := range vals {
		if v != vals[0] {
			return false
		}
	}
	return true
}

func firstOf(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return vals[0]
}

// checkInvalid: the handler cannot parse the body either.
func checkInvalid(t *testing.T, newReq func() *http.Request, err error) {
	t.Helper()
	if _, _, ok := parsedValues(newReq, "user"); ok {
		t.Fatalf("%v, but the handler parses the form", err)
	}
}
