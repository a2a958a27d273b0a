package floodgate

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// MaxFormBytes is the most of a request body KeyByForm and KeyByQuery
// read: a larger URL-encoded body gets ErrInvalidBody, and so does a
// multipart body whose field does not end within it.
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
// FormValue handler would act on it, a URL.Query one would not). The
// body is read only when the request carries a form body (see KeyByForm
// for how, and for its bound); a GET without one costs a scan of the
// query. A missing or empty parameter yields ErrNoKey. An empty param is
// an error wrapping ErrInvalidOption.
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
		return v.key("query parameter", param)
	}, nil
}

// KeyByForm returns a KeyFunc that keys a request by the form field
// field: the value the handler reads whichever standard accessor it
// uses (FormValue, PostFormValue, or ParseForm / ParseMultipartForm and
// then Form or PostForm). It is looked for where those look:
//
//   - the URL query, on any request;
//   - an application/x-www-form-urlencoded body, on POST, PUT or PATCH:
//     at most MaxFormBytes are read; a larger body gets ErrInvalidBody;
//   - a multipart/form-data body, on any method, as ParseMultipartForm
//     reads it: the parts named field that are not files. The first must
//     end within the first MaxFormBytes of the body (a file after it may
//     be of any size); otherwise, or for a malformed body, the error
//     wraps ErrInvalidBody. Files are skipped in memory, never written
//     to disk.
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
// another policy for it). A repeat of the field after the first
// MaxFormBytes of a multipart body is not seen: FormValue, PostFormValue
// and Form.Get return the first value, which is. A request without the
// field, or whose value is empty, yields ErrNoKey; an unreadable body,
// ErrInvalidBody. An empty field name is an error wrapping
// ErrInvalidOption.
func KeyByForm(field string) (KeyFunc, error) {
	if field == "" {
		return nil, keyArgError("KeyByForm", "empty field name: pass the name of the form field to key by, such as \"nickname\"")
	}
	return func(r *http.Request) (string, error) {
		v, err := formField(r, field)
		if err != nil {
			return "", err
		}
		return v.key("form field", field)
	}, nil
}

// fieldValues gathers the values a request gives one field, from every
// place a handler can read it, and whether they agree.
type fieldValues struct {
	first   string // the first value seen
	n       int    // how many values were seen
	differ  bool   // two of them differ
	inQuery bool   // the URL query gives one
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

// key returns the one value of the field, what and name describing it in
// an error.
func (v *fieldValues) key(what, name string) (string, error) {
	switch {
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
// peeked from the body, which is put back.
func formField(r *http.Request, field string) (fieldValues, error) {
	var v fieldValues
	if r.URL != nil {
		queryValues(r.URL.RawQuery, field, v.add)
	}
	v.inQuery = v.n > 0
	for _, s := range r.Form[field] {
		v.add(s)
	}
	for _, s := range r.PostForm[field] {
		v.add(s)
	}
	if r.MultipartForm != nil {
		for _, s := range r.MultipartForm.Value[field] {
			v.add(s)
		}
	}
	return v, bodyValues(r, field, &v)
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
		return multipartValues(r, params["boundary"], field, v.add)
	}
	return nil
}

// hasFormBody reports whether ParseForm reads a URL-encoded body for
// method.
func hasFormBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// queryValues calls add with each value of param in a URL-encoded query
// or body, by the rules of url.ParseQuery: pairs that do not decode, or
// hold a semicolon, are skipped.
func queryValues(q, param string, add func(string)) {
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
// does not end within them is read up to there: its first value of
// field must be whole by then.
func multipartValues(r *http.Request, boundary, field string, add func(string)) error {
	if boundary == "" {
		return fmt.Errorf("%w: multipart body without a boundary", ErrInvalidBody)
	}
	body, whole, err := peek(r, MaxFormBytes)
	if err != nil || len(body) == 0 {
		return err
	}
	found := false
	broken := func(err error) error {
		switch {
		case whole:
			return fmt.Errorf("%w: malformed multipart body: %v", ErrInvalidBody, err)
		case !found:
			return fmt.Errorf("%w: multipart field %q does not end within the first %d bytes", ErrInvalidBody, field, MaxFormBytes)
		}
		return nil // cut off at the bound, after the first value
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart() // decodes quoted-printable, as ParseMultipartForm does
		switch {
		case err == io.EOF:
			return nil
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
		found = true
	}
}
