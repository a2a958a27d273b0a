// Command server is floodgate's example service on Redis: the routes and
// limits of the in-memory example (examples/server in the floodgate
// module), with every limit's state in Redis, so that any number of
// instances behind a load balancer enforce one shared quota.
//
//	go run ./examples/server -redis localhost:6379 [-client rueidis|go-redis] [-addr :8080]
//	                         [-prefix fg:example] [-trusted-proxy 10.0.0.0/8]
//
// -redis takes one address, or several comma-separated ones for a Redis
// Cluster. Routes and limits:
//
//	GET  /auth/available/user_id?userId=…  10 per 10 minutes per client IP (token bucket);
//	                                        denied with the service's BPLTE429 envelope
//	POST /signup {"nickname":"…"}          5 per minute per nickname pattern (abc1, abc2 → abc{NUM}),
//	                                        else 20 per minute per client IP (sliding log), and
//	                                        always within 30 per hour per client IP (sliding log)
//	POST /rewards/claim {"accountId":"…"}  1 per day per account (token bucket), within
//	                                        30 per hour per client IP (sliding log)
//	GET  /healthz                           not limited
//
// Every limiter has an in-memory fallback of the same rate, which answers
// while Redis cannot be reached (per instance: during an outage a client
// may get its quota once per instance), and a deny cache, so that a
// flooding client costs Redis one call per Retry-After. Logs are JSON lines
// on standard error; the server stops on SIGINT or SIGTERM, giving requests
// in flight up to 10 seconds.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/floodgate-go/floodgate/internal/exampleapp"
	"github.com/floodgate-go/floodgate/redisstore"
	"github.com/floodgate-go/floodgate/redisstore/goredisstore"
	"github.com/floodgate-go/floodgate/redisstore/rueidisstore"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

func main() { exampleapp.Main(run) }

// connect returns a Scripter on the Redis at addrs through the named
// client, and a function that closes the client.
func connect(client string, addrs []string) (redisstore.Scripter, func(), error) {
	if len(addrs) == 0 {
		return nil, nil, errors.New("-redis: no address")
	}
	switch client {
	case "rueidis":
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
		if err != nil {
			return nil, nil, err
		}
		return rueidisstore.New(c), c.Close, nil
	case "go-redis":
		// Several addresses make a ClusterClient.
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		return goredisstore.New(c), func() { _ = c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("-client %q: want rueidis or go-redis", client)
}

// run serves until ctx is done, then shuts down gracefully. ready, if not
// nil, is told the address listened on (tests listen on port 0).
func run(ctx context.Context, args []string, logOut io.Writer, ready func(addr string)) error {
	fs := flag.NewFlagSet("server", flag.ContinueOnError)
	fs.SetOutput(logOut)
	addr := fs.String("addr", ":8080", "address to listen on")
	redisAddr := fs.String("redis", "localhost:6379", "Redis address, or comma-separated Cluster node addresses")
	client := fs.String("client", "rueidis", "Redis client: rueidis or go-redis")
	prefix := fs.String("prefix", "fg:example", "prefix of every Redis key")
	trusted := fs.String("trusted-proxy", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For is believed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	proxies, err := exampleapp.ParsePrefixes(*trusted)
	if err != nil {
		return err
	}
	scripter, closeRedis, err := connect(*client, exampleapp.SplitComma(*redisAddr))
	if err != nil {
		return err
	}
	defer closeRedis()
	logger := slog.New(slog.NewJSONHandler(logOut, nil))
	handler, err := newServer(config{Redis: scripter, Prefix: *prefix, TrustedProxies: proxies, Logger: logger})
	if err != nil {
		return err
	}
	return exampleapp.Serve(ctx, *addr, handler, logger, ready,
		slog.String("redis", *redisAddr), slog.String("client", *client))
}
