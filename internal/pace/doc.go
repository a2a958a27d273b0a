// Package pace keeps log lines from flooding the log: an attacker can
// make a rate limiter log on every request (each denial, each garbage
// key, each failure of a store it overloads), so floodgate's admission
// core writes at most one line per subject and period and reports how
// many it held back.
//
// A Window paces the lines about one subject (the store's failures, say):
// Admit says whether a line may be written now and how many were
// suppressed since the last one. Keys paces lines per key (denials of a
// client) in a table of bounded size: a flood of new keys is counted as
// "other", never grows the table.
//
// Nothing here reads a clock: callers pass the time, so tests walk a fixed
// timeline.
package pace
