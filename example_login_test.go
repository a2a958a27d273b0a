package floodgate_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// The declaration above the Example in this file is quoted verbatim by
// docs/policies.md (TestREADMESnippets keeps the two in step).

// limitLogin counts failed logins (401) only: 5 per 15 minutes per user
// name, 50 per 15 minutes per client IP. A successful login costs
// nothing, and no more guesses than a quota holds are ever in the
// handler at once: each is reserved before it runs, and given back if it
// succeeds.
func limitLogin(login http.Handler) (http.Handler, error) {
	byUser, err := floodgate.NewSlidingLog(floodgate.Rate{Limit: 5, Period: 15 * time.Minute})
	if err != nil {
		return nil, err
	}
	byIP, err := floodgate.NewSlidingLog(floodgate.Rate{Limit: 50, Period: 15 * time.Minute})
	if err != nil {
		return nil, err
	}
	user, err := floodgate.KeyByForm("user") // the value the handler reads with FormValue
	if err != nil {
		return nil, err
	}
	clientIP, err := floodgate.KeyByIP() // behind a proxy: TrustProxies, see docs/keys.md
	if err != nil {
		return nil, err
	}
	failed := floodgate.WithCountStatus(func(status int) bool { return status == http.StatusUnauthorized })
	perUser, err := floodgate.NewMiddleware(byUser,
		floodgate.WithPolicyName("login_user"), floodgate.WithKeyFunc(user), failed)
	if err != nil {
		return nil, err
	}
	perIP, err := floodgate.NewMiddleware(byIP,
		floodgate.WithPolicyName("login_ip"), floodgate.WithKeyFunc(clientIP), failed)
	if err != nil {
		return nil, err
	}
	return perIP(perUser(login)), nil
}

// A login: seven wrong passwords for one user are answered 401 five
// times, then 429, even with the right password; successful logins of
// another user from the same address cost nothing.
func Example_login() {
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("password") != "secret" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	handler, err := limitLogin(login)
	if err != nil {
		panic(err)
	}
	post := func(user, password string) int {
		form := url.Values{"user": {user}, "password": {password}}
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = "203.0.113.7:41000"
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		return w.Code
	}
	for range 7 {
		fmt.Print(post("victim", "guess"), " ")
	}
	fmt.Println(post("victim", "secret"))
	for range 10 {
		fmt.Print(post("alice", "secret"), " ")
	}
	fmt.Println()
	// Output:
	// 401 401 401 401 401 429 429 429
	// 200 200 200 200 200 200 200 200 200 200
}
