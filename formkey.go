package floodgate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// MaxFormBytes is the most of a request body KeyByForm and KeyByQuery
// read before the handler runs: a larger URL-encoded body gets
// ErrInvalidBody; of a larger multipart body, the rest is checked as the
// handler reads it (see KeyByForm).
const MaxFormBytes = 64 << 10

// KeyByQuery returns a KeyFunc that keys a request by the URL query
// parameter param, decoded as URL.Query would decode it (malformed pairs
// are skipped).
//
// A handler may read the parameter with URL.Query, but also with
// FormValue or Request.Form, which mix the query with a form body: a
// URL-encoded body of a POST, PUT or PATCH comes first, a
// multipart/form-data body (on any method) after the query. So the
// request is checked as KeyByForm checks it, and every value the handler
// could read must be the same: the parameter repeated with different
// values, or given a different value in a form body, yields
// ErrAmbiguousKey, and so does a parameter given only in a form body (a
// FormValue handler would act on it, a URL.Query one would not), and a
// query that reads differently where semicolons separate pairs too (see
// KeyByForm). The body is read only when the request carries a form body
// (see KeyByForm for how, and for its bound); a GET without one costs a
// scan of the query. A missing or empty parameter yields ErrNoKey (for a
// multipart body longer than MaxFormBytes, its rest is then checked to
// give no value either). An empty param is an error wrapping
// ErrInvalidOption.
func KeyByQuery(param string) (KeyFunc, error) {
	if param == "" {
		return nil, keyArgError("KeyByQuery", "empty parameter name: pass the name of the query parameter to key by, such as \"userId\"")
	}
	return func(r *http.Request) (string, error) {
		v, err := formField(r, param)
		if err != nil {
			return "", err
		}
		if !v.inQuery && v.first != "" && !v.differ {
			return "", fmt.Errorf("%w: query parameter %q is given in the form body, not in the URL query", ErrAmbiguousKey, param)
		}
		k, err := v.key("query parameter", param)
		v.handOn(r, param, err)
		return k, err
	}, nil
}

// KeyByForm returns a KeyFunc that keys a request by the form field
// field: the value the handler reads whichever standard accessor it
// uses (FormValue, PostFormValue, or ParseForm / ParseMultipartForm and
// then Form or PostForm). It is looked for where those look:
//
//   - the URL query, on any request, as url.ParseQuery reads it (a pair
//     holding a semicolon is skipped). A query that gives the field
//     another value where semicolons separate pairs too, as a handler
//     behind http.AllowQuerySemicolons reads it ("?user=victim;n=1"),
//     yields ErrAmbiguousKey: put the limit inside AllowQuerySemicolons,
//     where it sees the query the handler sees;
//   - an application/x-www-form-urlencoded body, on POST, PUT or PATCH:
//     at most MaxFormBytes are read; a larger body gets ErrInvalidBody;
//   - a multipart/form-data body, on any method, as ParseMultipartForm
//     reads it: the parts named field that are not files. Its first
//     MaxFormBytes are read before the handler runs: the field must be
//     given there, or in the query; otherwise, or for a malformed body,
//     the error wraps ErrInvalidBody. The rest of a longer body (a file
//     of any size, say) is checked as the handler reads it: the body is
//     handed on through a reader that parses the multipart stream as
//     it goes, streaming files through (never holding or writing them).
//     If a later part gives the field another value than the one
//     counted (repeating that value is harmless), the body the handler
//     reads ends before that part, closed as the end of the form: its
//     ParseMultipartForm succeeds with the parts sent before it, whole,
//     and every accessor gives the value counted or nothing. (Where the
//     end cannot be put on a part boundary, the body's Read fails with
//     an error wrapping ErrAmbiguousKey instead.) The reader holds about
//     20 KiB as the body streams through (MaxFormBytes + 32 KiB at most,
//     for a long part of the field or long part headers, beyond which
//     its Read fails with an error wrapping ErrInvalidBody), and parses
//     each byte the handler reads once more.
//
// A form that another middleware parsed before (a CSRF check calling
// ParseForm, say), whose body is gone, is read from Request.Form,
// PostForm and MultipartForm, where the handler will read it. A body
// still unread is handed on intact: the handler can read or parse all of
// it.
//
// The accessors disagree on precedence (FormValue prefers a URL-encoded
// body to the query but the query to a multipart body; PostFormValue
// ignores the query; Form holds every value), so the request is keyed
// only when they agree: every value of the field, in the query and in
// the body, must be the same, or the error wraps ErrAmbiguousKey (400
// under every error policy; a PolicySelector does not fall back to
// another policy for it). A request without the field, or whose value is
// empty, yields ErrNoKey; an unreadable body, ErrInvalidBody. An empty
// field name is an error wrapping ErrInvalidOption.
func KeyByForm(field string) (KeyFunc, error) {
	if field == "" {
		return nil, keyArgError("KeyByForm", "empty field name: pass the name of the form field to key by, such as \"nickname\"")
	}
	return func(r *http.Request) (string, error) {
		v, err := formField(r, field)
		if err != nil {
			return "", err
		}
		if v.boundary != "" && v.n == 0 {
			return "", fmt.Errorf("%w: multipart field %q does not end within the first %d bytes of the body", ErrInvalidBody, field, MaxFormBytes)
		}
		k, err := v.key("form field", field)
		v.handOn(r, field, err)
		return k, err
	}, nil
}

// fieldValues gathers the values a request gives one field, from every
// place a handler can read it, and whether they agree.
type fieldValues struct {
	first      string // the first value seen
	n          int    // how many values were seen
	differ     bool   // two of them differ
	inQuery    bool   // the URL query gives one
	semicolons bool   // the URL query gives another value where semicolons separate pairs
	boundary   string // of a multipart body read only in part, whose rest is still to check
}

func (v *fieldValues) add(s string) {
	switch {
	case v.n == 0:
		v.first = s
	case s != v.first:
		v.differ = true
	}
	v.n++
}

// join returns v with the values of w after its own.
func (v fieldValues) join(w fieldValues) fieldValues {
	switch {
	case w.n == 0:
		return v
	case v.n == 0:
		v.first = w.first
	case w.first != v.first:
		v.differ = true
	}
	v.differ = v.differ || w.differ
	v.n += w.n
	return v
}

// key returns the one value of the field, what and name describing it in
// an error.
func (v *fieldValues) key(what, name string) (string, error) {
	switch {
	case v.semicolons:
		return "", fmt.Errorf("%w: %s %q reads differently where semicolons separate query pairs, as behind http.AllowQuerySemicolons: separate them with & alone, or put the limit inside AllowQuerySemicolons", ErrAmbiguousKey, what, name)
	case v.differ:
		return "", fmt.Errorf("%w: %s %q is given %d times with different values", ErrAmbiguousKey, what, name, v.n)
	case v.first == "":
		return "", fmt.Errorf("%w: %s %q is missing or empty", ErrNoKey, what, name)
	}
	return v.first, nil
}

// formField gathers the values of field that the standard accessors can
// give r's handler: those of the URL query, of a form parsed earlier
// (Form, PostForm, MultipartForm) and of a form body still to be parsed,
// peeked from the body, which is put back. It notes whether they are the
// same where semicolons separate the query's pairs too:
// http.AllowQuerySemicolons, inside the limit, turns each ';' into '&'
// before the handler reads the query.
func formField(r *http.Request, field string) (fieldValues, error) {
	var query, rest fieldValues
	raw := ""
	if r.URL != nil {
		raw = r.URL.RawQuery
	}
	queryValues(raw, field, query.add)
	for _, s := range r.Form[field] {
		rest.add(s)
	}
	for _, s := range r.PostForm[field] {
		rest.add(s)
	}
	if r.MultipartForm != nil {
		for _, s := range r.MultipartForm.Value[field] {
			rest.add(s)
		}
	}
	err := bodyValues(r, field, &rest)
	v := query.join(rest)
	v.inQuery, v.boundary = query.n > 0, rest.boundary
	if strings.IndexByte(raw, ';') >= 0 {
		var split fieldValues
		queryValues(strings.ReplaceAll(raw, ";", "&"), field, split.add)
		alt := split.join(rest)
		v.semicolons = alt.differ || alt.first != v.first
	}
	return v, err
}

// Form media types, as mime.ParseMediaType spells them.
const (
	urlencodedType = "application/x-www-form-urlencoded"
	multipartType  = "multipart/form-data"
)

// bodyValues adds to v the values of field in r's form body that
// ParseForm or ParseMultipartForm has yet to parse.
func bodyValues(r *http.Request, field string, v *fieldValues) error {
	// The media type is found as mime.ParseMediaType finds it (lower
	// case first, so that "multİpart" is multipart too), without its
	// allocations for a request that carries no form.
	ct := r.Header.Get("Content-Type")
	base, _, _ := strings.Cut(ct, ";")
	switch strings.TrimSpace(strings.ToLower(base)) {
	case urlencodedType:
		// ParseForm reads it whatever the parameters, on these methods.
		if r.PostForm != nil || !hasFormBody(r.Method) {
			return nil
		}
		body, err := peekBody(r, MaxFormBytes)
		if err != nil {
			return err
		}
		queryValues(string(body), field, v.add)
	case multipartType:
		// ParseMultipartForm reads it only if the parameters parse.
		_, params, err := mime.ParseMediaType(ct)
		if r.MultipartForm != nil || err != nil {
			return nil
		}
		cut, err := multipartValues(r, params["boundary"], field, v.add)
		if cut {
			v.boundary = params["boundary"]
		}
		return err
	}
	return nil
}

// handOn puts r's body, if a multipart body was read only in part, behind
// a multipartCheck that the rest gives field no other value than v's, the
// one counted. It is for a request keyed by that value, or let through
// without a key (ErrNoKey, err): a request refused for its key needs no
// check, and one that WithDryRun lets through all the same is not failed
// by one.
func (v *fieldValues) handOn(r *http.Request, field string, err error) {
	if v.boundary != "" && (err == nil || errors.Is(err, ErrNoKey)) {
		r.Body = newMultipartCheck(r.Body, v.boundary, field, v.first)
	}
}

// hasFormBody reports whether ParseForm reads a URL-encoded body for
// method.
func hasFormBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// manyPairs is the number of pairs from which queryValues leaves a query
// to url.ParseQuery itself, whose limit on the number of pairs (10,000 by
// default since Go 1.24; GODEBUG urlmaxqueryparams) then drops every
// value, for the handler as for the key.
const manyPairs = 100

// queryValues calls add with each value of param in a URL-encoded query
// or body, by the rules of url.ParseQuery: pairs that do not decode, or
// hold a semicolon, are skipped.
func queryValues(q, param string, add func(string)) {
	if len(q) >= manyPairs && strings.Count(q, "&") >= manyPairs { // the length first: a short query costs no count
		vals, _ := url.ParseQuery(q) // what it could parse, as the handler gets it
		for _, s := range vals[param] {
			add(s)
		}
		return
	}
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, val, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k)
		if err != nil || k != param {
			continue
		}
		if val, err = url.QueryUnescape(val); err != nil {
			continue
		}
		add(val)
	}
}

// multipartValues calls add with each non-file value of field in r's
// multipart body, reading no more than MaxFormBytes of it. A body that
// does not end within them is read up to there (cut): a value cut off
// there is not added.
func multipartValues(r *http.Request, boundary, field string, add func(string)) (cut bool, err error) {
	if boundary == "" {
		return false, fmt.Errorf("%w: multipart body without a boundary", ErrInvalidBody)
	}
	body, whole, err := peek(r, MaxFormBytes)
	if err != nil || len(body) == 0 {
		return false, err
	}
	broken := func(err error) (bool, error) {
		if whole {
			return false, fmt.Errorf("%w: malformed multipart body: %v", ErrInvalidBody, err)
		}
		return true, nil
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart() // decodes quoted-printable, as ParseMultipartForm does
		switch {
		case err == io.EOF:
			return false, nil
		case err != nil:
			return broken(err)
		case p.FormName() != field || p.FileName() != "":
			continue // NextPart skips the rest of this part
		}
		val, err := io.ReadAll(p) // bounded: body is
		if err != nil {
			return broken(err)
		}
		add(string(val))
	}
}
