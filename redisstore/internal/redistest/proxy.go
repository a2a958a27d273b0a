package redistest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// DropProxy forwards TCP connections to a Redis server; when Armed, it
// closes the client's connection instead of passing on the next reply, as
// a network failure after the server ran the command would.
type DropProxy struct {
	// Armed drops the next reply; it disarms itself.
	Armed atomic.Bool
	ln    net.Listener
	to    string
	wg    sync.WaitGroup
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
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() {
			defer p.wg.Done()
			defer func() { _ = c.Close() }()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if err != nil {
					return
				}
				if p.Armed.CompareAndSwap(true, false) {
					_ = s.Close()
					return
				}
				if _, err := c.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
	}
}
