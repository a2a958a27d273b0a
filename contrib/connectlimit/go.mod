module github.com/floodgate-go/floodgate/contrib/connectlimit

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/floodgate-go/floodgate v0.2.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/protobuf v1.36.12
)

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	golang.org/x/time v0.12.0 // indirect
)
