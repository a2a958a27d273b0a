package turnstile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"

	"github.com/floodgate-go/floodgate/turnstile"
)

// dummySiteverify answers like siteverify does for Cloudflare's dummy
// secrets, so that the examples run without the network.
func dummySiteverify(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.PostFormValue("secret") {
	case "1x0000000000000000000000000000000AA":
		_, _ = io.WriteString(w, `{"success":true,"challenge_ts":"2026-12-01T08:00:00.000Z","hostname":"example.com","error-codes":[],"action":"signup","cdata":""}`)
	case "2x0000000000000000000000000000000AA":
		_, _ = io.WriteString(w, `{"success":false,"error-codes":["invalid-input-response"]}`)
	default:
		_, _ = io.WriteString(w, `{"success":false,"error-codes":["invalid-input-secret"]}`)
	}
}

// Verifying a token from business code, for example in a sign-up service
// that receives the token along with the form it processes itself.
func ExampleVerifier_Verify() {
	siteverify := httptest.NewServer(http.HandlerFunc(dummySiteverify))
	defer siteverify.Close()

	for _, secret := range []string{"1x0000000000000000000000000000000AA", "2x0000000000000000000000000000000AA"} {
		v, err := turnstile.New(secret,
			turnstile.WithEndpoint(siteverify.URL), // omit in production
			turnstile.WithHostnames("example.com"),
			turnstile.WithAction("signup"),
		)
		if err != nil {
			fmt.Println(err)
			return
		}
		res, err := v.Verify(context.Background(), "XXXX.DUMMY.TOKEN.XXXX", "203.0.113.7")
		var rej *turnstile.RejectedError
		switch {
		case err == nil:
			fmt.Println("human, solved on", res.Hostname, "for", res.Action)
		case errors.As(err, &rej):
			fmt.Println("403, rejected:", rej.Codes)
		case errors.Is(err, turnstile.ErrUnavailable):
			fmt.Println("503, try again later")
		default:
			fmt.Println("400 or 500:", err)
		}
	}
	// Output:
	// human, solved on example.com for signup
	// 403, rejected: [invalid-input-response]
}

// Guarding a sign-up route: the bot check runs first, and the handler (in
// floodgate's scenario, the nickname-pattern rate limit and then the
// sign-up itself) sees the verified Result and the untouched form.
func ExampleMiddleware() {
	siteverify := httptest.NewServer(http.HandlerFunc(dummySiteverify))
	defer siteverify.Close()

	v, err := turnstile.New("1x0000000000000000000000000000000AA",
		turnstile.WithEndpoint(siteverify.URL), // omit in production
		turnstile.WithHostnames("example.com"),
		turnstile.WithAction("signup"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	botCheck, err := turnstile.Middleware(v)
	if err != nil {
		fmt.Println(err)
		return
	}
	signup := botCheck(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := turnstile.FromContext(r.Context())
		_, _ = fmt.Fprintf(w, "welcome %s (checked on %s)\n", r.FormValue("nickname"), res.Hostname)
	}))

	post := func(form url.Values) {
		r := httptest.NewRequest(http.MethodPost, "/signup", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		signup.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body)
	}
	post(url.Values{"nickname": {"abc1"}, turnstile.FormField: {"XXXX.DUMMY.TOKEN.XXXX"}})
	post(url.Values{"nickname": {"abc2"}})
	// Output:
	// 200 welcome abc1 (checked on example.com)
	// 400 {"type":"about:blank","title":"Bad Request","status":400,"detail":"The request carries no bot-check token."}
}
