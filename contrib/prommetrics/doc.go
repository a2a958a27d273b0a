// Package prommetrics exports floodgate's decisions and limiter state to
// Prometheus.
package prommetrics
