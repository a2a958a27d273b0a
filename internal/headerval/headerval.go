// Package headerval holds the rule by which floodgate's key functions
// read a header (or a gRPC metadata key) that a request may give on
// several lines: the HTTP middleware's KeyByHeader, grpclimit's
// KeyByMetadata and connectlimit's KeyByHeader share it, so that every
// transport keys a repeated header alike.
package headerval

import "strings"

// One returns the value lines give, each trimmed of optional white space
// (spaces and tabs): the value of every line, when they all give the
// same one. When they differ (an empty line beside a non-empty one
// included) ok is false: a handler reading another line than the first
// (the last, the first non-empty one) would act on another value than
// the one counted. No lines give "" and true.
func One(lines []string) (v string, ok bool) {
	if len(lines) == 0 {
		return "", true
	}
	v = strings.Trim(lines[0], " \t")
	for _, l := range lines[1:] {
		if strings.Trim(l, " \t") != v {
			return "", false
		}
	}
	return v, true
}
