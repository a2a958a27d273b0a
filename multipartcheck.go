package floodgate

import (
	"bytes"
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
	// checkLookBack is how far before the last byte it has read when a
	// part ends the check looks for the next part's delimiter: more than
	// mime/multipart's read-ahead (4 KiB), less than checkHoldback, so
	// that none of those bytes has been handed on yet.
	checkLookBack = checkHoldback / 2
)

// errCheckFull is what the check's tap gives mime/multipart when the
// check would hold more than checkMaxPending bytes.
var errCheckFull = errors.New("floodgate: multipart check full")

// multipartCheck is the request body a key function hands on when it
// could read only the first MaxFormBytes of a multipart/form-data body.
// As the handler reads the body, it parses the multipart stream with
// mime/multipart, as ParseMultipartForm will, and checks that every part
// that is a value of field (not a file) gives want, the key counted. A
// repeat of want is harmless. At a part that gives another value, the
// body the handler reads ends, before any byte of that part: the check
// hands on the bytes up to the delimiter that part begins with (or an
// earlier one) and then closes the form there ("--boundary--" and the end of the body), so the
// handler's ParseMultipartForm succeeds with the parts before it, as
// sent, and every accessor gives want or nothing (a handler that ignores
// the parse's error cannot be handed a nil MultipartForm by the check).
// Where it cannot place that end on a delimiter mime/multipart
// recognises, Read fails with an error wrapping ErrAmbiguousKey instead.
//
// Files and other fields stream through, in 4 KiB steps: the check holds
// checkHoldback bytes behind what it has parsed, and at most
// checkMaxPending. It parses the body once more than the handler does,
// and only as far as the handler reads it. An error is sticky: the
// handler's later reads fail too.
type multipartCheck struct {
	src      io.ReadCloser // the body: what the key function peeked, then the rest
	boundary string
	field    string
	want     string
	read     int64             // the bytes of src the tap has read
	mark     int64             // the next part's delimiter starts at this byte of src or after it
	ended    bool              // a part has ended: mark is set
	cut      bool              // the form was closed before a part giving another value
	mr       *multipart.Reader // reads src through tap
	part     *multipart.Part   // the part being read, nil between parts
	keyPart  bool              // part is a value of field: nothing is handed on until it ends
	matched  int               // the bytes of want the key part has given so far
	pending  []byte            // bytes mr has read from src; the handler has had pending[:off]
	off      int
	full     bool          // the tap refused mr more bytes
	srcErr   error         // the error src gave, if not io.EOF
	done     bool          // mr found the closing boundary: the rest is handed on as is
	err      error         // what Read returns from then on
	buf      [4 << 10]byte // where a part is read
}

// newMultipartCheck returns body wrapped in a multipartCheck of the
// parts named field in a multipart body with boundary.
func newMultipartCheck(body io.ReadCloser, boundary, field, want string) *multipartCheck {
	c := &multipartCheck{src: body, boundary: boundary, field: field, want: want, pending: make([]byte, 0, 2*checkHoldback)}
	c.mr = multipart.NewReader(checkTap{c}, boundary)
	return c
}

// Read hands on the bytes of the body the check has parsed.
func (c *multipartCheck) Read(p []byte) (int, error) {
	for c.ready() == 0 && !c.done && !c.cut && c.err == nil {
		c.step()
	}
	if n := c.ready(); n > 0 {
		n = copy(p, c.pending[c.off:c.off+n])
		c.off += n
		return n, nil
	}
	switch {
	case c.err != nil:
		return 0, c.err
	case c.cut:
		return 0, io.EOF
	}
	return c.src.Read(p) // done: the epilogue, which no parser reads
}

// Close closes the original body.
func (c *multipartCheck) Close() error { return c.src.Close() }

// ready returns how many pending bytes may be handed on.
func (c *multipartCheck) ready() int {
	held := len(c.pending) - c.off
	switch {
	case c.done, c.cut:
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
		c.closeBefore()
		return
	}
	switch {
	case err == io.EOF:
		c.part, c.keyPart = nil, false
		// mime/multipart has found the next delimiter in what it has
		// read ahead.
		c.mark, c.ended = max(c.read-checkLookBack, 0), true
	case err != nil:
		c.stop(err)
	}
}

// closeBefore ends the body handed on before the part being read, which
// gives the field another value: at the first delimiter from where that
// part's may start, which it closes as the end of the form.
func (c *multipartCheck) closeBefore() {
	at, ok := c.delimiterBefore()
	if !ok {
		c.err = fmt.Errorf("%w: multipart field %q is given again, past the first %d bytes of the body, with another value than the one counted", ErrAmbiguousKey, c.field, MaxFormBytes)
		return
	}
	// "\n--boundary--" and the end of the body: the close of the form in
	// either line-end mode (a '\r' before it ends the last part's content
	// in one, is part of it in the other, as in the body sent).
	c.pending = append(append(append(c.pending[:at], "\n--"...), c.boundary...), "--"...)
	c.cut = true
}

// delimiterBefore returns the index in pending of the '\n' that starts
// the first delimiter from mark on, which is that of the part being read
// or of one before it. A delimiter is "\n--boundary" followed by white
// space, a line end or "--", as mime/multipart ends a part's content
// there; the bytes before it are handed on as sent, so every part before
// it is parsed whole, as it was sent. Before any part has ended, the
// part being read is the first: the index is 0 (nothing has been handed
// on). It reports false where the delimiter may already be handed on.
func (c *multipartCheck) delimiterBefore() (int, bool) {
	handed := c.read - int64(len(c.pending)-c.off)
	if !c.ended {
		return c.off, handed == 0
	}
	if c.mark < handed {
		return 0, false
	}
	delim := []byte("\n--" + c.boundary)
	for i := c.off + int(c.mark-handed); i < len(c.pending); {
		j := bytes.Index(c.pending[i:], delim)
		if j < 0 {
			return 0, false
		}
		i += j
		if endsContent(c.pending[i+len(delim):]) {
			return i, true
		}
		i++
	}
	return 0, false
}

// endsContent reports whether after, the bytes after "\n--boundary",
// make it a delimiter for mime/multipart: white space, a line end, "--".
func endsContent(after []byte) bool {
	switch {
	case len(after) == 0:
		return false
	case after[0] == ' ', after[0] == '\t', after[0] == '\r', after[0] == '\n':
		return true
	}
	return len(after) > 1 && after[0] == '-' && after[1] == '-'
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
	c.read += int64(n)
	c.pending = append(c.pending, p[:n]...)
	if err != nil && err != io.EOF && c.srcErr == nil {
		c.srcErr = err
	}
	return n, err
}
