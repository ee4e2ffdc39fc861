module github.com/fabric-host/fabric

go 1.26

require (
	github.com/valkey-io/valkey-go v1.0.79 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
