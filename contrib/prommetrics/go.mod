module github.com/floodgate-go/floodgate/contrib/prommetrics

go 1.26.0

require (
	github.com/floodgate-go/floodgate v0.2.0
	github.com/floodgate-go/floodgate/redisstore v0.2.0
	github.com/prometheus/client_golang v1.25.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.74.0
)
