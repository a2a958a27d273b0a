package floodgate

import (
	"errors"
	"fmt"
	"io"
	"mime/multipart"
)

// The bounds of a multipartCheck.
const (
	// checkHoldback is how many of the bytes the check has read it keeps
	// from the handler. mime/multipart reads ahead of what it has parsed
	// by at most its buffer (4 KiB, in Go 1.21 to 1.26); holding back
	// more than that hands the handler no byte the check has not parsed.
	// TestMultipartCheckHandsOnOnlyParsed fails if a Go release reads
	// further ahead.
	checkHoldback = 16 << 10
	// checkMaxPending is the most the check holds at once: the holdback,
	// and a part of the key's field, held whole until it is compared (no
	// longer than MaxFormBytes when it repeats the value that had to fit
	// there), or a part's headers. More is ErrInvalidBody.
	checkMaxPending = MaxFormBytes + 2*checkHoldback
)

// errCheckFull is what the check's tap gives mime/multipart when the
// check would hold more than checkMaxPending bytes.
var errCheckFull = errors.New("floodgate: multipart check full")

// multipartCheck is the request body a key function hands on when it
// could read only the first MaxFormBytes of a multipart/form-data body.
// As the handler reads the body, it parses the multipart stream with
// mime/multipart, as ParseMultipartForm will, and checks that every part
// that is a value of field (not a file) gives want, the key counted. A
// part that gives another value makes Read fail with an error wrapping
// ErrAmbiguousKey, before the handler has any byte of that value: the
// handler's ParseMultipartForm fails, and FormValue, PostFormValue, Form,
// PostForm and MultipartForm then hold nothing from the body. A repeat of
// want is harmless.
//
// Files and other fields stream through, in 4 KiB steps: the check holds
// checkHoldback bytes behind what it has parsed, and at most
// checkMaxPending. It parses the body once more than the handler does,
// and only as far as the handler reads it. The error is sticky: the
// handler's later reads fail too.
type multipartCheck struct {
	src     io.ReadCloser // the body: what the key function peeked, then the rest
	field   string
	want    string
	mr      *multipart.Reader // reads src through tap
	part    *multipart.Part   // the part being read, nil between parts
	keyPart bool              // part is a value of field: nothing is handed on until it ends
	matched int               // the bytes of want the key part has given so far
	pending []byte            // bytes mr has read from src; the handler has had pending[:off]
	off     int
	full    bool          // the tap refused mr more bytes
	srcErr  error         // the error src gave, if not io.EOF
	done    bool          // mr found the closing boundary: the rest is handed on as is
	err     error         // what Read returns from then on
	buf     [4 << 10]byte // where a part is read
}

// newMultipartCheck returns body wrapped in a multipartCheck of the
// parts named field in a multipart body with boundary.
func newMultipartCheck(body io.ReadCloser, boundary, field, want string) *multipartCheck {
	c := &multipartCheck{src: body, field: field, want: want, pending: make([]byte, 0, 2*checkHoldback)}
	c.mr = multipart.NewReader(checkTap{c}, boundary)
	return c
}

// Read hands on the bytes of the body the check has parsed.
func (c *multipartCheck) Read(p []byte) (int, error) {
	for c.ready() == 0 && !c.done && c.err == nil {
		c.step()
	}
	if n := c.ready(); n > 0 {
		n = copy(p, c.pending[c.off:c.off+n])
		c.off += n
		return n, nil
	}
	if c.err != nil {
		return 0, c.err
	}
	return c.src.Read(p) // done: the epilogue, which no parser reads
}

// Close closes the original body.
func (c *multipartCheck) Close() error { return c.src.Close() }

// ready returns how many pending bytes may be handed on.
func (c *multipartCheck) ready() int {
	held := len(c.pending) - c.off
	switch {
	case c.done:
		return held
	case c.err != nil, c.keyPart:
		return 0
	}
	return max(held-checkHoldback, 0)
}

// step parses a little more of the body: the next part's headers, or up
// to 4 KiB of the current part.
func (c *multipartCheck) step() {
	if c.part == nil {
		p, err := c.mr.NextPart()
		if err != nil {
			c.stop(err)
			return
		}
		c.part, c.matched = p, 0
		c.keyPart = p.FormName() == c.field && p.FileName() == "" // as ReadForm tells a value
		return
	}
	n, err := c.part.Read(c.buf[:])
	if c.keyPart && !c.match(c.buf[:n], err == io.EOF) {
		c.err = fmt.Errorf("%w: multipart field %q is given again, past the first %d bytes of the body, with another value than the one counted", ErrAmbiguousKey, c.field, MaxFormBytes)
		return
	}
	switch {
	case err == io.EOF:
		c.part, c.keyPart = nil, false
	case err != nil:
		c.stop(err)
	}
}

// match reports whether b, the next bytes of a value of the field, still
// agree with want; at the value's end, whether it was all of want.
func (c *multipartCheck) match(b []byte, end bool) bool {
	rest := c.want[c.matched:]
	if len(b) > len(rest) || string(b) != rest[:len(b)] {
		return false
	}
	c.matched += len(b)
	return !end || c.matched == len(c.want)
}

// stop ends the parse on err from mr: io.EOF, the closing boundary, hands
// the rest of the body on as it comes; any other error is the handler's
// too.
func (c *multipartCheck) stop(err error) {
	switch {
	case err == io.EOF:
		c.done = true
	case c.full:
		c.err = fmt.Errorf("%w: multipart body holds a field or part header longer than %d bytes past its first %d bytes", ErrInvalidBody, checkMaxPending, MaxFormBytes)
	case c.srcErr != nil:
		c.err = c.srcErr // the handler sees the body's own error (a *http.MaxBytesError, say)
	default:
		c.err = fmt.Errorf("%w: malformed multipart body: %v", ErrInvalidBody, err)
	}
}

// checkTap is the reader mime/multipart parses: it reads src and keeps
// what it read, for the handler.
type checkTap struct{ c *multipartCheck }

func (t checkTap) Read(p []byte) (int, error) {
	c := t.c
	if len(c.pending)-c.off >= checkMaxPending {
		c.full = true
		return 0, errCheckFull
	}
	if cap(c.pending)-len(c.pending) < len(p) && c.off > 0 {
		// Move what the handler has yet to read to the front: about
		// once every checkHoldback bytes.
		c.pending = c.pending[:copy(c.pending, c.pending[c.off:])]
		c.off = 0
	}
	n, err := c.src.Read(p)
	c.pending = append(c.pending, p[:n]...)
	if err != nil && err != io.EOF && c.srcErr == nil {
		c.srcErr = err
	}
	return n, err
}
