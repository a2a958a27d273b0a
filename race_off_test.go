//go:build !race

package floodgate_test

const raceEnabled = false
