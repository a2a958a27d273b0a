// Package otelmetrics exports floodgate's decisions and limiter state
// through OpenTelemetry instruments.
package otelmetrics
