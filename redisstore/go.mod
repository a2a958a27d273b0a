module github.com/floodgate-go/floodgate/redisstore

go 1.26.0


require (
	github.com/floodgate-go/floodgate v0.2.0
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/redis/go-redis/v9 v9.23.0
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/time v0.12.0 // indirect
)
