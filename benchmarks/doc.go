// Package benchmarks measures floodgate side by side with the rate limiters
// a Go service would otherwise pick, on the same work and in the same run.
//
// It is a module of its own (github.com/floodgate-go/floodgate/benchmarks)
// so that the peers it imports never enter floodgate's own module. Run the
// whole comparison and print its table with
//
//	cd benchmarks && go run ./cmd/report
//
// or pick cases with go test, e.g.
//
//	go test -run '^$' -bench 'Decision/hot' -benchmem
//
// Every case checks each decision it times: an "allowed" case fails if a
// library denies once, a "denied" case fails if it allows once, so no
// library can win by doing less. Each library is configured the way its own
// documentation recommends, with the same quota as the others; where a
// library's model forces a different but equivalent setting (a fixed window
// that would otherwise end mid-run and forget its keys), peers.go says why.
package benchmarks
