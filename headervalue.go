package floodgate

import (
	"strings"
	"sync"
)

// A header value (RateLimit, Retry-After, a legacy count) goes to a
// transport as a one-element slice, which the transport keeps until the
// response is sent: an http.Header value, a gRPC metadata value. Made
// one by one, each is two small allocations, its string and its slice —
// on every request under a quota whose values change on every request,
// as a client spending its own quota sees. Instead the values are carved
// from blocks: a block holds the slices' backing arrays and a
// strings.Builder whose buffer holds the strings' bytes, each written
// once and never again, so that a value costs a share of a block's two
// allocations, 1/32 of each.
//
// A block is one goroutine's at a time (a sync.Pool keeps one a P);
// the values it hands out are written before they are handed out, and
// read by others only after (through the caller, or a table's atomic
// pointer), while the block's next owner writes other bytes. A value
// keeps its block, about 2.2 KB, alive. The rest of a block's values
// live as long as the responses that hold them, but the tables of
// recent values keep theirs: at worst (every slot's value from another
// block, each slot still hit) 64 blocks a policy (RateLimit, 140 KB) and
// 256 for the integers (Retry-After, the legacy counts: 560 KB). A
// table's values are usually a few blocks' worth: a miss replaces a
// slot's value with the newest.

// Block sizes: 32 values of 32 bytes, which a default RateLimit value
// ("default";r=16777216;t=3600) fits.
const (
	blockValues = 32
	blockBytes  = 1024
	// maxBlockValue is the longest value carved from a block; a longer
	// one (a policy name of a hundred characters) is allocated alone.
	maxBlockValue = 128
)

// headerValue is one formatted value and what it was formatted from (a
// and b: the remaining count and t of a RateLimit value, the number of
// an integer), for the tables that share it.
type headerValue struct {
	a, b  int64
	value [1]string // value[:] is the header value; value[0] points into a block's text
}

// valueBlock is a block of header values.
type valueBlock struct {
	text   strings.Builder // never reset or grown: the strings handed out point into its buffer
	values [blockValues]headerValue
	used   int
}

func newValueBlock() *valueBlock {
	b := &valueBlock{}
	b.text.Grow(blockBytes)
	return b
}

// blocks holds the current block of each P.
var blocks = sync.Pool{New: func() any { return newValueBlock() }}

// newHeaderValue returns a value holding a copy of text, formatted from a
// and b. It never writes the value again.
func newHeaderValue(a, b int64, text []byte) *headerValue {
	if len(text) > maxBlockValue {
		return &headerValue{a: a, b: b, value: [1]string{string(text)}}
	}
	blk := blocks.Get().(*valueBlock)
	if blk.used == blockValues || blk.text.Cap()-blk.text.Len() < len(text) {
		// Full: the old block lives on while values point into it.
		blk = newValueBlock()
	}
	start := blk.text.Len()
	_, _ = blk.text.Write(text) // within its capacity: no copy of the buffer, no error
	v := &blk.values[blk.used]
	blk.used++
	v.a, v.b = a, b
	// String returns the bytes written so far without copying them; the
	// builder only ever appends after them.
	v.value[0] = blk.text.String()[start:]
	blocks.Put(blk)
	return v
}
