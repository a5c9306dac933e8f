// Package envd holds the Go code generated from envd's process and
// filesystem schemas (spec/), for the provider and its fake; CI builds it
// as committed, without protoc.
package envd

//go:generate protoc --proto_path=spec --go_out=. --go_opt=module=github.com/boxfs/boxfs/providers/e2b/internal/envd --connect-go_out=. --connect-go_opt=module=github.com/boxfs/boxfs/providers/e2b/internal/envd process/process.proto filesystem/filesystem.proto
