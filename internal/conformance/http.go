package conformance

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The headers an HTTP call carries its step in.
const (
	HeaderClient = "X-Client"
	HeaderAction = "X-Action"
	HeaderCost   = "X-Cost"
)

// HTTPKey is the key function of the HTTP drivers: the call's client, or
// ErrNoKey without one (and ErrKeyFailed for Unkeyable).
func HTTPKey(r *http.Request) (string, error) {
	if c := r.Header.Get(HeaderClient); c != "" {
		return KeyFailure(c, nil)
	}
	return "", floodgate.ErrNoKey
}

// HTTPOptions are the middleware options that serve s.
func HTTPOptions(s Setup) []floodgate.MiddlewareOption {
	opts := []floodgate.MiddlewareOption{floodgate.WithKeyFunc(HTTPKey), floodgate.WithDecisionHook(s.Hook)}
	if s.FailOpen {
		opts = append(opts, floodgate.WithFailOpen())
	}
	if s.CountFailures {
		opts = append(opts, floodgate.WithCountStatus(func(status int) bool { return status == http.StatusUnauthorized }))
	}
	if s.CostAfter {
		opts = append(opts, floodgate.WithCostAfter(floodgate.CostReported))
	}
	if s.Wait != nil {
		opts = append(opts, floodgate.WithWait(*s.Wait), floodgate.WithWaitTimer(s.Timer))
	}
	if s.Stats != nil {
		opts = append(opts, floodgate.WithGateStats(s.Stats))
	}
	return opts
}

// HTTPAct does what an HTTP call asks: 200, 401, or a panic, having
// reported the cost it names. ran is called first.
func HTTPAct(w http.ResponseWriter, r *http.Request, ran func()) {
	ran()
	if n, err := strconv.Atoi(r.Header.Get(HeaderCost)); err == nil {
		_ = floodgate.ReportCost(r.Context(), n) // the case checks what was charged
	}
	switch Action(r.Header.Get(HeaderAction)) {
	case Fail:
		http.Error(w, "wrong password", http.StatusUnauthorized)
	case Panic:
		panic(http.ErrAbortHandler) // net/http breaks the connection off, quietly
	default:
		_, _ = io.WriteString(w, "ok")
	}
}

// HTTPClient calls url over HTTP and reads the answers.
type HTTPClient struct {
	URL    string
	Client *http.Client
}

// Do implements Client.
func (c HTTPClient) Do(ctx context.Context, st Step) Answer {
	// No body: net/http's server watches for a hang-up only once the
	// request's body is read, and nothing here reads it.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, http.NoBody)
	if err != nil {
		return Answer{Kind: "bad request", Detail: err.Error()}
	}
	if st.Client != "" {
		req.Header.Set(HeaderClient, st.Client)
	}
	req.Header.Set(HeaderAction, string(st.Action))
	if st.Cost > 0 {
		req.Header.Set(HeaderCost, strconv.Itoa(st.Cost))
	}
	resp, err := c.Client.Do(req)
	switch {
	case err != nil && ctx.Err() != nil:
		return Answer{Kind: HungUp, Detail: err.Error()}
	case err != nil && st.Action == Panic:
		return Answer{Kind: Panicked, Detail: err.Error()}
	case err != nil:
		return Answer{Kind: "transport error", Detail: err.Error()}
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	a := Answer{Detail: resp.Status + " " + string(body)}
	switch resp.StatusCode {
	case http.StatusOK:
		a.Kind = OK
	case http.StatusUnauthorized:
		a.Kind = Failed
	case http.StatusTooManyRequests:
		a.Kind = Denied
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			a.RetryAfter = time.Duration(s) * time.Second
		}
	case http.StatusBadRequest:
		a.Kind = ClientError
	case http.StatusServiceUnavailable:
		a.Kind = Unavailable
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			a.Kind, a.RetryAfter = Overloaded, time.Duration(s)*time.Second
		}
	case http.StatusInternalServerError:
		a.Kind = Panicked
	default:
		a.Kind = Kind(resp.Status)
	}
	return a
}
