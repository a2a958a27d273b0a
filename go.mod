module github.com/floodgate-go/floodgate

go 1.23.0

require (
	github.com/hashicorp/golang-lru/v2 v2.0.7
	github.com/stretchr/testify v1.12.1
	golang.org/x/time v0.12.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
