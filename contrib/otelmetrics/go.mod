module github.com/floodgate-go/floodgate/contrib/otelmetrics

go 1.26.0

require (
	github.com/floodgate-go/floodgate v0.2.0
	github.com/floodgate-go/floodgate/redisstore v0.2.0
	go.opentelemetry.io/otel v1.47.0
	go.opentelemetry.io/otel/metric v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
)
