//go:build ignore

// Command gen writes testdata/sdk.golden: the wire shapes of every message,
// enum and service boxfs's .proto subset declares, as the pinned Modal SDK
// (sdkwire.Package, fetched with npm pack) encodes them.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/boxfs/boxfs/providers/modal/internal/pb"
	"github.com/boxfs/boxfs/providers/modal/internal/sdkwire"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "sdkwire-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	js, err := sdkwire.Fetch(ctx, dir)
	if err != nil {
		log.Fatal(err)
	}
	sdk, err := sdkwire.Extract(js)
	if err != nil {
		log.Fatal(err)
	}
	ours := sdkwire.FromDescriptors(pb.File_modal_proto_api_proto, pb.File_modal_proto_task_command_router_proto)
	if err := os.WriteFile("testdata/sdk.golden", []byte(sdk.Format(ours.Names())), 0o644); err != nil {
		log.Fatal(err)
	}
}
