module github.com/floodgate-go/floodgate

go 1.23.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	golang.org/x/time v0.12.0
)
