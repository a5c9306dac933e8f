// Command specgen writes spec.txt, the table of Daytona's routes and
// fields, from the npm packs pinned in versions. It needs npm and the npm
// registry. Run it from the module's root:
//
//	go run ./providers/daytona/daytonatest/spec/specgen
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/boxfs/boxfs/providers/daytona/daytonatest/spec"
)

const out = "providers/daytona/daytonatest/spec/spec.txt"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "specgen:", err)
		os.Exit(1)
	}
}

func run() error {
	if _, err := os.Stat(filepath.Dir(out)); err != nil {
		return fmt.Errorf("run from the module's root: %v", err)
	}
	dir, err := os.MkdirTemp("", "specgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, warnings, err := spec.Generate(ctx, dir)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "specgen: warning:", w)
	}
	var b bytes.Buffer
	if err := s.Format(&b); err != nil {
		return err
	}
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("specgen: wrote %s: %d routes\n", out, len(s.Routes))
	return nil
}
