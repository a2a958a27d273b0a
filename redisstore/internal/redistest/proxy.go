package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// DropProxy forwards TCP connections to a Redis server. When Armed, it
// lets the next script command (EVALSHA or EVAL) through, waits for the
// server's reply to it — so the server has run the script — and then
// closes the client's connection instead of passing the reply on: a reply
// lost after execution, as a network failure at the worst moment would
// lose it.
//
// It reads the protocol (RESP2 and RESP3) in both directions to pair each
// reply with its command, so that a reply to an earlier command (a
// client's health-check PING, say) is never mistaken for the script's,
// and no command sent after the script reaches the server on that
// connection.
type DropProxy struct {
	// Armed drops the reply of the next script command; it disarms itself.
	Armed atomic.Bool
	// Dropped counts the replies dropped.
	Dropped atomic.Int64
	ln      net.Listener
	to      string
	wg      sync.WaitGroup
}

// Addr is where clients connect.
func (p *DropProxy) Addr() string { return p.ln.Addr().String() }

// NewDropProxy starts a DropProxy to the server at to, closed when t ends.
func NewDropProxy(t testing.TB, to string) *DropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DropProxy{ln: ln, to: to}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *DropProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.to)
		if err != nil {
			_ = c.Close()
			continue
		}
		// dropAt is the index of the command whose reply is dropped, -1
		// for none yet.
		var dropAt atomic.Int64
		dropAt.Store(-1)
		closeBoth := func() { _ = c.Close(); _ = s.Close() }
		p.wg.Add(2)
		go func() {
			defer p.wg.Done()
			defer closeBoth()
			r := bufio.NewReader(c)
			for i := int64(0); ; i++ {
				raw, name, err := readCommand(r)
				if err != nil {
					return
				}
				if dropAt.Load() >= 0 {
					return // nothing after the script reaches the server
				}
				if (name == "EVALSHA" || name == "EVAL") && p.Armed.CompareAndSwap(true, false) {
					dropAt.Store(i)
				}
				if _, err := s.Write(raw); err != nil {
					return
				}
			}
		}()
		go func() {
			defer p.wg.Done()
			defer closeBoth()
			r := bufio.NewReader(s)
			for i := int64(0); ; {
				var buf bytes.Buffer
				push, err := readValue(r, &buf)
				if err != nil {
					return
				}
				if !push {
					if i == dropAt.Load() {
						p.Dropped.Add(1)
						return
					}
					i++
				}
				if _, err := c.Write(buf.Bytes()); err != nil {
					return
				}
			}
		}()
	}
}

// readCommand reads one client command, a RESP array of bulk strings or
// an inline command, and returns its bytes and its name in upper case.
func readCommand(r *bufio.Reader) (raw []byte, name string, err error) {
	b, err := r.Peek(1)
	if err != nil {
		return nil, "", err
	}
	if b[0] != '*' {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, "", err
		}
		f := strings.Fields(string(line))
		if len(f) > 0 {
			name = strings.ToUpper(f[0])
		}
		return line, name, nil
	}
	var buf bytes.Buffer
	if _, err := readValue(r, &buf); err != nil {
		return nil, "", err
	}
	raw = buf.Bytes()
	// *N\r\n$len\r\nNAME\r\n...
	parts := bytes.SplitN(raw, []byte("\r\n"), 4)
	if len(parts) >= 3 {
		name = strings.ToUpper(string(parts[2]))
	}
	return raw, name, nil
}

// readValue copies one RESP value from r to w and reports whether it was
// an out-of-band push (RESP3 '>'), which answers no command.
func readValue(r *bufio.Reader, w *bytes.Buffer) (push bool, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return false, err
	}
	w.Write(line)
	if len(line) < 3 {
		return false, errors.New("redistest: short RESP line")
	}
	n, _ := strconv.Atoi(string(bytes.TrimRight(line[1:], "\r\n")))
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return false, nil
	case '$', '!', '=':
		if n < 0 {
			return false, nil
		}
		_, err := io.CopyN(w, r, int64(n)+2)
		return false, err
	case '*', '~', '>':
		for i := 0; i < n; i++ {
			if _, err := readValue(r, w); err != nil {
				return false, err
			}
		}
		return line[0] == '>', nil
	case '%':
		for i := 0; i < 2*n; i++ {
			if _, err := readValue(r, w); err != nil {
				return false, err
			}
		}
		return false, nil
	case '|':
		// Attributes precede the value they describe.
		for i := 0; i < 2*n; i++ {
			if _, err := readValue(r, w); err != nil {
				return false, err
			}
		}
		return readValue(r, w)
	}
	return false, fmt.Errorf("redistest: unknown RESP type %q", line[0])
}
