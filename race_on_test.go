//go:build race

package floodgate_test

// raceEnabled scales the heaviest tests down under the race detector, which
// makes each decision an order of magnitude slower.
const raceEnabled = true
