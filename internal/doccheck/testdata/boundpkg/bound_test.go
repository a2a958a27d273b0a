package boundpkg

import "testing"

func TestBoundHolds(t *testing.T) {}
