package floodgate

// WithStoreSeed exports withStoreSeed to the tests of package
// floodgate_test: a store built with it hashes keys under seed, so that a
// randomized test that fails replays where its keys landed.
var WithStoreSeed = withStoreSeed
