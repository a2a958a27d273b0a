package floodgate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// pastWindow is a file larger than MaxFormBytes, so that what follows it
// in a multipart body is read by the handler only.
var pastWindow = strings.Repeat("A", 70<<10)

// TestMultipartCheckRefusesAnotherValue: issue 18 item 1, a field
// repeated past the first MaxFormBytes of a multipart body. Before the
// check, "user=x1, a 70 KB file, user=victim" was counted under x1 and
// served as victim to a handler reading the last value of Form or
// PostForm, or any of MultipartForm.Value. Now the request is counted
// under the first value and the body the handler reads ends before the
// part giving the other value: its ParseMultipartForm succeeds with the
// parts before (the file whole), and no accessor gives it the other
// value. A repeat of the value counted, or a file of the field's name,
// is harmless: the handler gets the whole form.
func TestMultipartCheckRefusesAnotherValue(t *testing.T) {
	qp := "Content-Transfer-Encoding: quoted-printable"
	tests := []struct {
		name   string
		kf     KeyFunc
		target string
		parts  []string // name, filename, content; "qp:" before a name encodes the value
		key    string
		keyErr error // of the key function
		refuse bool  // the body must end before the other value
	}{
		{"x1, file, victim", mustKey(KeyByForm("user")), "/login", []string{"user", "", "x1", "avatar", "a.png", pastWindow, "user", "", "victim"}, "x1", nil, true},
		{"empty, file, victim", mustKey(KeyByForm("user")), "/login", []string{"user", "", "", "avatar", "a.png", pastWindow, "user", "", "victim"}, "", ErrNoKey, true},
		{"query x1, file, victim", mustKey(KeyByForm("user")), "/login?user=x1", []string{"avatar", "a.png", pastWindow, "user", "", "victim"}, "x1", nil, true},
		{"victim1, file, victim (a prefix)", mustKey(KeyByForm("user")), "/login", []string{"user", "", "victim1", "avatar", "a.png", pastWindow, "user", "", "victim"}, "victim1", nil, true},
		{"victim, file, victim1 (longer)", mustKey(KeyByForm("user")), "/login", []string{"user", "", "victim", "avatar", "a.png", pastWindow, "user", "", "victim1"}, "victim", nil, true},
		{"x1, file, victim quoted-printable", mustKey(KeyByForm("user")), "/login", []string{"user", "", "x1", "avatar", "a.png", pastWindow, "qp:user", "", "vic=74im"}, "x1", nil, true},
		{"x1, file, empty", mustKey(KeyByForm("user")), "/login", []string{"user", "", "x1", "avatar", "a.png", pastWindow, "user", "", ""}, "x1", nil, true},
		{"KeyByQuery: no query, file, victim", mustKey(KeyByQuery("user")), "/login", []string{"avatar", "a.png", pastWindow, "user", "", "victim"}, "", ErrNoKey, true},
		{"KeyByQuery: query x1, file, victim", mustKey(KeyByQuery("user")), "/login?user=x1", []string{"avatar", "a.png", pastWindow, "user", "", "victim"}, "x1", nil, true},
		{"victim, file, victim", mustKey(KeyByForm("user")), "/login", []string{"user", "", "victim", "avatar", "a.png", pastWindow, "user", "", "victim"}, "victim", nil, false},
		{"victim, file, victim quoted-printable", mustKey(KeyByForm("user")), "/login", []string{"user", "", "victim", "avatar", "a.png", pastWindow, "qp:user", "", "vic=74im"}, "victim", nil, false},
		{"x1, file, a file named user", mustKey(KeyByForm("user")), "/login", []string{"user", "", "x1", "avatar", "a.png", pastWindow, "user", "victim.txt", "victim"}, "x1", nil, false},
		{"KeyByQuery: query x1, file, x1", mustKey(KeyByQuery("user")), "/login?user=x1", []string{"avatar", "a.png", pastWindow, "user", "", "x1"}, "x1", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := multipartBodyQP(t, qp, tc.parts...)
			r := httptest.NewRequest(http.MethodPost, tc.target, strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			key, err := tc.kf(r)
			if key != tc.key || !errors.Is(err, tc.keyErr) || (tc.keyErr == nil) != (err == nil) {
				t.Fatalf("key %q, %v; want %q, %v", key, err, tc.key, tc.keyErr)
			}
			perr := r.ParseMultipartForm(1 << 20)
			defer removeForm(r)
			if !tc.refuse {
				if perr != nil || len(r.MultipartForm.File["avatar"]) != 1 || r.MultipartForm.File["avatar"][0].Size != int64(len(pastWindow)) {
					t.Fatalf("handler's ParseMultipartForm: %v; want the whole form", perr)
				}
				return
			}
			if perr != nil {
				t.Fatalf("handler's ParseMultipartForm: %v; want the form closed before the other value", perr)
			}
			checkOnlyCounted(t, r, key)
		})
	}
}

// checkOnlyCounted: after a parse of a body closed before a part giving
// another value, every accessor gives the value counted or nothing, the
// parts before (the file) are whole, and the body has nothing more.
func checkOnlyCounted(t *testing.T, r *http.Request, key string) {
	t.Helper()
	if v := r.FormValue("user"); v != key {
		t.Errorf("FormValue %q; counted %q", v, key)
	}
	if v := r.PostFormValue("user"); v != key && v != "" {
		t.Errorf("PostFormValue %q; counted %q", v, key)
	}
	for _, vals := range [][]string{r.Form["user"], r.PostForm["user"], r.MultipartForm.Value["user"]} {
		for _, v := range vals {
			if v != key {
				t.Errorf("the form holds %q; counted %q", v, key)
			}
		}
	}
	if f := r.MultipartForm.File["avatar"]; len(f) != 1 || f[0].Size != int64(len(pastWindow)) {
		t.Errorf("avatar %v; want the whole file, sent before the other value", f)
	}
	if rest, err := io.ReadAll(r.Body); len(rest) != 0 || err != nil {
		t.Errorf("after the form: %q, %v; want the end of the body", rest, err)
	}
}

// multipartBodyQP is multipartBody, where a part whose name starts with
// "qp:" gets the header qp and its content as given.
func multipartBodyQP(t testing.TB, qp string, parts ...string) (body, contentType string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+2 < len(parts); i += 3 {
		name, encoded := strings.CutPrefix(parts[i], "qp:")
		h := make(map[string][]string)
		h["Content-Disposition"] = []string{fmt.Sprintf("form-data; name=%q", name)}
		if parts[i+1] != "" {
			h["Content-Disposition"][0] += fmt.Sprintf("; filename=%q", parts[i+1])
		}
		if encoded {
			k, v, _ := strings.Cut(qp, ": ")
			h[k] = []string{v}
		}
		pw, err := w.CreatePart(h)
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

// TestMultipartCheckHandsOnOnlyParsed: a handler that streams the parts
// (MultipartReader) and acts on a value as soon as it has read it whole
// never gets the other value, wherever it falls against mime/multipart's
// buffer and whatever the size of the handler's reads: the check hands
// on no byte it has not parsed, and none of a part of the field until it
// has compared it. This fails if mime/multipart ever reads further ahead
// than checkHoldback.
func TestMultipartCheckHandsOnOnlyParsed(t *testing.T) {
	kf := mustKey(KeyByForm("user"))
	// A long field after the other value: mime/multipart may read it
	// ahead, and with it the end of the value before.
	tail := strings.Repeat("n", 4*checkHoldback)
	for pad := 0; pad < 3*checkHoldback; pad += 997 {
		for _, chunk := range []int{1, 700, 4096, 1 << 20} {
			file := strings.Repeat("A", 70<<10+pad)
			body, ct := multipartBody(t, "user", "", "x1", "avatar", "a.png", file, "user", "", "victim", "note", "", tail)
			r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			if k, err := kf(r); k != "x1" || err != nil {
				t.Fatalf("key %q, %v", k, err)
			}
			cr := &chunkReader{r: r.Body, n: chunk}
			r.Body = io.NopCloser(cr)
			mr, err := r.MultipartReader()
			if err != nil {
				t.Fatal(err)
			}
			if got := streamValues(mr, "user"); len(got) != 1 || got[0] != "x1" {
				t.Fatalf("pad %d, reads of %d: the handler read the values %q whole; want only x1", pad, chunk, got)
			}
			if bytes.Contains(cr.seen.Bytes(), []byte("victim")) {
				t.Fatalf("pad %d, reads of %d: the handler was handed bytes of the other value", pad, chunk)
			}
		}
	}
}

// streamValues returns the values of field a handler streaming the parts
// reads whole, without an error, until the first error.
func streamValues(mr *multipart.Reader, field string) []string {
	var vals []string
	for {
		p, err := mr.NextPart()
		if err != nil {
			return vals
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return vals
		}
		if p.FormName() == field && p.FileName() == "" {
			vals = append(vals, string(b))
		}
	}
}

// chunkReader reads r in reads of at most n bytes, and keeps what it read.
type chunkReader struct {
	r    io.Reader
	n    int
	seen bytes.Buffer
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p[:min(len(p), c.n)])
	c.seen.Write(p[:n])
	return n, err
}

// TestMultipartCheckBounded: the check holds no more than its bounds,
// whatever streams through it: an 8 MiB file leaves its buffer at its
// first size; part headers, or a value of the field, longer than
// checkMaxPending (a quoted-printable value of soft line breaks decodes
// to little and is long) are ErrInvalidBody, not held whole.
func TestMultipartCheckBounded(t *testing.T) {
	softBreaks := strings.Repeat("=\r\n", checkMaxPending/3+1) + "x1"
	qp := func(h map[string][]string) { h["Content-Transfer-Encoding"] = []string{"quoted-printable"} }
	longHeader := func(h map[string][]string) { h["X-Pad"] = []string{strings.Repeat("p", checkMaxPending)} }
	first := []partSpec{{name: "user", content: "x1"}, {name: "avatar", file: "a.png", content: pastWindow}}
	tests := []struct {
		name    string
		last    partSpec
		wantErr error
	}{
		{"8 MiB file", partSpec{name: "video", file: "v.mp4", content: strings.Repeat("V", 8<<20)}, nil},
		{"a long part header", partSpec{name: "note", content: "n", header: longHeader}, ErrInvalidBody},
		{"a long quoted-printable value", partSpec{name: "user", content: softBreaks, header: qp}, ErrInvalidBody},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := rawParts(t, append(first, tc.last)...)
			r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			if k, err := mustKey(KeyByForm("user"))(r); k != "x1" || err != nil {
				t.Fatalf("key %q, %v", k, err)
			}
			c := r.Body.(*multipartCheck)
			most := 0
			mr := multipart.NewReader(readFunc(func(p []byte) (int, error) {
				n, err := c.Read(p)
				most = max(most, cap(c.pending))
				return n, err
			}), mustBoundary(t, ct))
			form, err := mr.ReadForm(32 << 20)
			if form != nil {
				defer form.RemoveAll()
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("handler's ReadForm: %v; want %v", err, tc.wantErr)
			}
			limit := 2 * checkHoldback // its first size
			if tc.wantErr != nil {
				limit = 2 * (checkMaxPending + 4<<10) // grown by append
			}
			if most > limit {
				t.Errorf("the check held a buffer of %d bytes; want at most %d", most, limit)
			}
		})
	}
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

func mustBoundary(t testing.TB, ct string) string {
	_, b, ok := strings.Cut(ct, "boundary=")
	if !ok {
		t.Fatalf("no boundary in %q", ct)
	}
	return b
}

// partSpec is a part for rawParts: header adds headers to its own.
type partSpec struct {
	name, file, content string
	header              func(map[string][]string)
}

// rawParts builds a multipart/form-data body of parts.
func rawParts(t testing.TB, parts ...partSpec) (body, contentType string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for _, p := range parts {
		cd := fmt.Sprintf("form-data; name=%q", p.name)
		if p.file != "" {
			cd += fmt.Sprintf("; filename=%q", p.file)
		}
		h := map[string][]string{"Content-Disposition": {cd}}
		if p.header != nil {
			p.header(h)
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, p.content)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String(), w.FormDataContentType()
}

// TestMultipartCheckBodyErrors: the body's own read error reaches the
// handler as it is (a *http.MaxBytesError stays one); a body cut short
// is ErrInvalidBody; a body read whole, with what follows its closing
// boundary, is handed on as sent.
func TestMultipartCheckBodyErrors(t *testing.T) {
	body, ct := multipartBody(t, "user", "", "x1", "avatar", "a.png", pastWindow, "user", "", "x1")
	newReq := func(b io.Reader) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/login", b)
		r.Header.Set("Content-Type", ct)
		return r
	}
	capped := newReq(nil)
	capped.Body = http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(body)), int64(len(body)-100))
	cut := newReq(strings.NewReader(body[:len(body)-100]))
	epilogue := newReq(strings.NewReader(body + "epilogue"))
	for _, r := range []*http.Request{capped, cut, epilogue} {
		if k, err := mustKey(KeyByForm("user"))(r); k != "x1" || err != nil {
			t.Fatalf("key %q, %v", k, err)
		}
	}
	var tooLarge *http.MaxBytesError
	if err := capped.ParseMultipartForm(1 << 20); !errors.As(err, &tooLarge) {
		t.Errorf("over http.MaxBytesReader: %v; want its *http.MaxBytesError", err)
	}
	if err := cut.ParseMultipartForm(1 << 20); !errors.Is(err, ErrInvalidBody) {
		t.Errorf("cut short: %v; want ErrInvalidBody", err)
	}
	if all, err := io.ReadAll(epilogue.Body); string(all) != body+"epilogue" || err != nil {
		t.Errorf("read whole: %d bytes, %v; want the %d sent", len(all), err, len(body)+len("epilogue"))
	}
}

// FuzzMultipartCheck: over any body, a handler that parses the form
// through the check never gets another value of field than the one
// counted. Where the form it would get without the check gives only that
// value, it gets that form, whole. Otherwise it gets the form closed at a
// part boundary (each field's values a prefix of those sent, every part
// before whole), or an error: ErrAmbiguousKey, ErrInvalidBody, or one
// the body gives without the check too. The bytes handed on are the
// body's, then the close of the form where it was closed early.
func FuzzMultipartCheck(f *testing.F) {
	mp := func(vals ...string) []byte {
		var b strings.Builder
		for _, v := range vals {
			b.WriteString("--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\n" + v + "\r\n")
		}
		return []byte(b.String() + "--XX--\r\n")
	}
	f.Add(mp("x1", "x1"), "x1")
	f.Add(mp("x1", "victim"), "x1")
	f.Add(mp("victim", "victim1"), "victim")
	f.Add(mp("", "victim"), "")
	f.Add(mp("victim", "x1"), "x1")
	f.Add(mp("victim--XX ", "x1"), "victim--XX ")
	f.Add(mp("victim\r\n--XXy", "x1"), "victim\r\n--XXy")
	f.Add([]byte("--XX\nContent-Disposition: form-data; name=user\n\nvictim\r\n--XX\nContent-Disposition: form-data; name=user\n\nx1\n--XX--\n"), "victim\r")
	f.Add([]byte("pre\r\n--XX\r\nContent-Disposition: form-data; name=\"user\"; filename=\"f\"\r\n\r\nvictim\r\n--XX\r\nContent-Disposition: form-data; name=user\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nx=31\r\n--XX--\r\nepi"), "x1")
	f.Add([]byte("--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nx1\r\n--XX"), "x1")
	f.Fuzz(func(t *testing.T, body []byte, want string) {
		direct, derr := multipart.NewReader(bytes.NewReader(body), "XX").ReadForm(1 << 20)
		if derr == nil {
			defer direct.RemoveAll()
		}
		handed := new(bytes.Buffer)
		c := newMultipartCheck(io.NopCloser(bytes.NewReader(body)), "XX", "user", want)
		checked, cerr := multipart.NewReader(io.TeeReader(c, handed), "XX").ReadForm(1 << 20)
		if cerr == nil {
			defer checked.RemoveAll()
		}
		sent, closing := handed.Bytes(), []byte("\n--XX--")
		if c.cut {
			if !bytes.HasSuffix(sent, closing) {
				t.Fatalf("closed early, handed on %q", sent)
			}
			sent = sent[:len(sent)-len(closing)]
		}
		if !bytes.HasPrefix(body, sent) {
			t.Fatalf("handed on %q, not a prefix of the body", sent)
		}
		honest := derr == nil && allEqual(direct.Value["user"], want)
		switch {
		case cerr == nil && !allEqual(checked.Value["user"], want):
			t.Fatalf("through the check, user %q; counted %q", checked.Value["user"], want)
		case honest && (cerr != nil || c.cut || !sameValues(direct.Value, checked.Value)):
			t.Fatalf("through the check %v, %v (closed early %v); without it the form %v gives only %q", checked, cerr, c.cut, direct.Value, want)
		case cerr == nil && derr == nil && !prefixValues(checked.Value, direct.Value):
			t.Fatalf("through the check %v; sent %v", checked.Value, direct.Value)
		case cerr == nil && !c.cut && (derr != nil || !sameValues(direct.Value, checked.Value)):
			t.Fatalf("through the check, not closed early, %v; without it %v (%v)", checked.Value, direct.Value, derr)
		case cerr != nil && !errors.Is(cerr, ErrAmbiguousKey) && !errors.Is(cerr, ErrInvalidBody) && derr == nil:
			t.Fatalf("through the check: %v, undocumented", cerr)
		}
	})
}

// prefixValues reports whether each field's values in a begin those in b.
func prefixValues(a, b map[string][]string) bool {
	for k, va := range a {
		if len(va) > len(b[k]) || strings.Join(va, "\x00") != strings.Join(b[k][:len(va)], "\x00") {
			return false
		}
	}
	return true
}

func allEqual(vals []string, want string) bool {
	for _, v := range vals {
		if v != want {
			return false
		}
	}
	return true
}

func sameValues(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		if strings.Join(va, "\x00") != strings.Join(b[k], "\x00") || len(va) != len(b[k]) {
			return false
		}
	}
	return true
}

// BenchmarkMultipartCheck: what the check costs an honest upload larger
// than MaxFormBytes (the user field, then a file), beside the handler's
// own ParseMultipartForm of the same body (the baseline of each pair).
func BenchmarkMultipartCheck(b *testing.B) {
	kf := mustKey(KeyByForm("user"))
	for _, size := range []int{128 << 10, 1 << 20, 8 << 20} {
		text, ct := multipartBody(b, "user", "", "ann", "avatar", "a.png", strings.Repeat("A", size), "password", "", "correct horse")
		raw := []byte(text)
		for _, checked := range []bool{false, true} {
			name := fmt.Sprintf("%dKiB/ParseMultipartForm", size>>10)
			if checked {
				name = fmt.Sprintf("%dKiB/KeyByForm+ParseMultipartForm", size>>10)
			}
			b.Run(name, func(b *testing.B) {
				body := new(resettableBody)
				r := httptest.NewRequest(http.MethodPost, "/login", nil)
				r.Header.Set("Content-Type", ct)
				b.SetBytes(int64(len(raw)))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					body.Reset(raw)
					r.Body, r.Form, r.PostForm, r.MultipartForm = body, nil, nil, nil
					if checked {
						if k, err := kf(r); k != "ann" || err != nil {
							b.Fatalf("key %q, %v", k, err)
						}
					}
					if err := r.ParseMultipartForm(32 << 20); err != nil || r.MultipartForm.File["avatar"][0].Size != int64(size) {
						b.Fatalf("ParseMultipartForm: %v", err)
					}
				}
			})
		}
	}
}

// TestMultipartCheckClosesOnDelimiterOnly: the form is closed only at a
// delimiter mime/multipart ends a part's content at, never inside a
// value. A counted value holding the boundary where it is not a
// delimiter ("victim\r\n--XXy"), just before the part giving another
// value, with part headers padded to move it across the check's
// look-back, must reach the handler whole or not at all: never cut to
// "victim".
func TestMultipartCheckClosesOnDelimiterOnly(t *testing.T) {
	for _, want := range []string{"victim--XX", "victim\r\n--XXy", "victim\n--XX-x", "victim\r\n--XX"} {
		for pad := 0; pad < 3*checkHoldback; pad += 509 {
			var b strings.Builder
			b.WriteString("--XX\r\nContent-Disposition: form-data; name=\"avatar\"; filename=\"a.png\"\r\n\r\n" + pastWindow + "\r\n")
			b.WriteString("--XX\r\nX-Pad: " + strings.Repeat("p", pad) + "\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\n" + want + "\r\n")
			b.WriteString("--XX\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nz\r\n--XX--\r\n")
			c := newMultipartCheck(io.NopCloser(strings.NewReader(b.String())), "XX", "user", want)
			form, err := multipart.NewReader(c, "XX").ReadForm(1 << 20)
			if err != nil {
				if !errors.Is(err, ErrAmbiguousKey) && !errors.Is(err, ErrInvalidBody) {
					t.Fatalf("%q, pad %d: %v", want, pad, err)
				}
				continue
			}
			form.RemoveAll()
			if !allEqual(form.Value["user"], want) || !c.cut {
				t.Fatalf("%q, pad %d: the handler's form holds user %q (closed early %v); counted %q", want, pad, form.Value["user"], c.cut, want)
			}
		}
	}
}

// TestMultipartCheckStacked: two form key functions (JoinKeys of the
// user and the org) each hand the body on through a check of their own
// field, the second reading through the first. An honest upload past
// MaxFormBytes reaches the handler whole; one repeating either field
// with another value past the window reaches it without that value.
func TestMultipartCheckStacked(t *testing.T) {
	kf := mustKey(JoinKeys(mustKey(KeyByForm("user")), mustKey(KeyByForm("org"))))
	tests := []struct {
		name  string
		parts []string
		whole bool
	}{
		{"honest", []string{"user", "", "ann", "org", "", "acme", "avatar", "a.png", pastWindow, "password", "", "pw"}, true},
		{"user again", []string{"user", "", "ann", "org", "", "acme", "avatar", "a.png", pastWindow, "user", "", "victim", "password", "", "pw"}, false},
		{"org again", []string{"user", "", "ann", "org", "", "acme", "avatar", "a.png", pastWindow, "org", "", "evil", "password", "", "pw"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := multipartBody(t, tc.parts...)
			r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			if k, err := kf(r); k != "3:ann4:acme" || err != nil {
				t.Fatalf("key %q, %v", k, err)
			}
			if err := r.ParseMultipartForm(1 << 20); err != nil {
				t.Fatalf("handler's ParseMultipartForm: %v", err)
			}
			defer removeForm(r)
			if fmt.Sprint(r.PostForm["user"], r.PostForm["org"]) != "[ann] [acme]" {
				t.Errorf("the handler's form: user %q, org %q; counted ann, acme", r.PostForm["user"], r.PostForm["org"])
			}
			if got := r.PostForm.Get("password") == "pw"; got != tc.whole {
				t.Errorf("the handler got the password part: %v; want %v", got, tc.whole)
			}
			if f := r.MultipartForm.File["avatar"]; len(f) != 1 || f[0].Size != int64(len(pastWindow)) {
				t.Errorf("avatar %v; want the whole file", f)
			}
		})
	}
}
