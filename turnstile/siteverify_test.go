package turnstile_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"
)

// Cloudflare's dummy secret keys, documented for testing: the first passes
// every token, the second fails every token, the third answers that the
// token was already spent.
const (
	secretPass  = "1x0000000000000000000000000000000AA"
	secretFail  = "2x0000000000000000000000000000000AA"
	secretSpent = "3x0000000000000000000000000000000AA"
)

// call is one request the fake siteverify received.
type call struct {
	contentType string
	form        url.Values
}

// fakeSiteverify is a local siteverify implementing the documented
// behaviour: the dummy secrets, single-use tokens (a token seen a second
// time is timeout-or-duplicate) and idempotency keys (a repeat of a
// request with the same key gets the first answer again, rather than
// being counted as a second use of the token). Any other secret is
// invalid-input-secret. Its fields script faults; set them before use.
type fakeSiteverify struct {
	url string

	hostname string // answered for good tokens
	action   string
	cdata    string

	mu             sync.Mutex
	calls          []call
	spent          map[string]bool   // tokens already validated
	answers        map[string][]byte // idempotency key -> answer
	internalErrors int               // answer internal-error this many times first
	lostAnswers    int               // decide (spending the token), then answer 502, this many times
	status         int               // when set, answer with this status and raw
	raw            []byte            // when set, answer with these bytes instead
	header         http.Header       // added to a raw answer (a redirect's Location, say)
	block          bool              // hold every request until the client gives up
	arrivals       int               // requests received, blocked ones included
	arrived        chan struct{}     // when set, told of each arrival (buffered by the test)
	release        chan struct{}     // closed when the test ends, freeing held requests
}

// loopback returns a listener on a loopback address. When none can be had
// the test is skipped, or fails under FLOODGATE_REQUIRE_SERVERS=1.
func loopback(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		if l, err = net.Listen("tcp6", "[::1]:0"); err != nil {
			if os.Getenv("FLOODGATE_REQUIRE_SERVERS") == "1" {
				t.Fatalf("no loopback listener: %v", err)
			}
			t.Skipf("skipping: no loopback listener: %v", err)
		}
	}
	return l
}

// unreachableURL returns an http URL at which nothing listens any more.
func unreachableURL(t *testing.T) string {
	t.Helper()
	l := loopback(t)
	u := "http://" + l.Addr().String()
	_ = l.Close()
	return u
}

// newFake starts a fake siteverify on loopback, closed when t ends.
func newFake(t *testing.T) *fakeSiteverify {
	t.Helper()
	l := loopback(t)
	f := &fakeSiteverify{
		hostname: "example.com",
		spent:    map[string]bool{},
		answers:  map[string][]byte{},
		release:  make(chan struct{}),
	}
	srv := httptest.NewUnstartedServer(f)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.release) }) // runs before srv.Close

	f.url = srv.URL
	return f
}

func (f *fakeSiteverify) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.arrivals++
	block, arrived := f.block, f.arrived
	f.mu.Unlock()
	if arrived != nil {
		arrived <- struct{}{}
	}
	if block {
		// The server notices a client hanging up only once the body has
		// been read, so read it, then hold until the client gives up.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-f.release:
		}
		return
	}
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if err := r.ParseForm(); err != nil {
		writeAnswer(w, false, []string{"bad-request"}, nil)
		return
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call{contentType: r.Header.Get("Content-Type"), form: r.PostForm})
	if f.raw != nil {
		for k, vs := range f.header {
			w.Header()[k] = vs
		}
		if f.status != 0 {
			w.WriteHeader(f.status)
		}
		_, _ = w.Write(f.raw)
		return
	}
	if f.internalErrors > 0 {
		f.internalErrors--
		writeAnswer(w, false, []string{"internal-error"}, nil)
		return
	}
	key := r.PostForm.Get("idempotency_key")
	if a, ok := f.answers[key]; ok && key != "" {
		_, _ = w.Write(a)
		return
	}
	a := f.decide(r.PostForm)
	if key != "" {
		f.answers[key] = a
	}
	if f.lostAnswers > 0 {
		f.lostAnswers--
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	_, _ = w.Write(a)
}

// decide answers one validation, spending the token; f.mu is held.
func (f *fakeSiteverify) decide(form url.Values) []byte {
	secret, token := form.Get("secret"), form.Get("response")
	switch {
	case secret == "":
		return answer(false, []string{"missing-input-secret"}, nil)
	case token == "":
		return answer(false, []string{"missing-input-response"}, nil)
	}
	switch secret {
	case secretPass:
		if f.spent[token] {
			return answer(false, []string{"timeout-or-duplicate"}, nil)
		}
		f.spent[token] = true
		return answer(true, []string{}, map[string]string{
			"challenge_ts": time.Date(2026, 12, 1, 8, 0, 0, 123e6, time.UTC).Format(time.RFC3339Nano),
			"hostname":     f.hostname,
			"action":       f.action,
			"cdata":        f.cdata,
		})
	case secretFail:
		return answer(false, []string{"invalid-input-response"}, nil)
	case secretSpent:
		return answer(false, []string{"timeout-or-duplicate"}, nil)
	default:
		return answer(false, []string{"invalid-input-secret"}, nil)
	}
}

func answer(success bool, codes []string, fields map[string]string) []byte {
	m := map[string]any{"success": success, "error-codes": codes}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func writeAnswer(w http.ResponseWriter, success bool, codes []string, fields map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(answer(success, codes, fields))
}

// seen returns a copy of the calls received so far.
func (f *fakeSiteverify) seen() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

// set runs change under the fake's lock, to script it between requests.
func (f *fakeSiteverify) set(change func(f *fakeSiteverify)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}
