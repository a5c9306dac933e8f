// Package all registers every provider boxfs ships with: import it for its
// side effect. Only cmd/boxfs imports it; the scripted fake is not included.
package all

import (
	_ "github.com/boxfs/boxfs/providers/archil"     // directories of an Archil work disk (API key)
	_ "github.com/boxfs/boxfs/providers/daytona"    // Daytona sandboxes (API key)
	_ "github.com/boxfs/boxfs/providers/docker"     // Docker containers
	_ "github.com/boxfs/boxfs/providers/e2b"        // E2B sandboxes (API key)
	_ "github.com/boxfs/boxfs/providers/kubernetes" // Kubernetes pods
	_ "github.com/boxfs/boxfs/providers/local"      // directories on this machine
	_ "github.com/boxfs/boxfs/providers/modal"      // Modal sandboxes (token id and secret)
)
