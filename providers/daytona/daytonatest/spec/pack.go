package spec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NPMPack fetches each pack with `npm pack` into dir and returns the files
// of each, by plane. It needs npm on PATH and the npm registry.
func NPMPack(ctx context.Context, dir string, packs []Pack) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	for _, p := range packs {
		cmd := exec.CommandContext(ctx, "npm", "pack", "--silent", "--pack-destination", dir, p.Name+"@"+p.Version)
		cmd.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false")
		b, err := cmd.Output()
		if err != nil {
			msg := ""
			if ee, ok := err.(*exec.ExitError); ok {
				msg = strings.TrimSpace(string(ee.Stderr))
			}
			return nil, fmt.Errorf("npm pack %s@%s: %v %s", p.Name, p.Version, err, msg)
		}
		lines := strings.Fields(strings.TrimSpace(string(b)))
		if len(lines) == 0 {
			return nil, fmt.Errorf("npm pack %s@%s named no tarball", p.Name, p.Version)
		}
		f, err := os.Open(filepath.Join(dir, lines[len(lines)-1]))
		if err != nil {
			return nil, err
		}
		files, err := Files(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s@%s: %v", p.Name, p.Version, err)
		}
		if got := packageVersion(files["package.json"]); got != p.Version {
			return nil, fmt.Errorf("npm pack %s@%s gave version %q", p.Name, p.Version, got)
		}
		out[p.Plane] = files
	}
	return out, nil
}

// packageVersion reads "version" from a package.json without decoding the
// rest.
func packageVersion(pj string) string {
	i := strings.Index(pj, `"version"`)
	if i < 0 {
		return ""
	}
	rest := pj[i+len(`"version"`):]
	_, rest, _ = strings.Cut(rest, `"`)
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// Generate packs the pinned versions into dir and extracts the table.
func Generate(ctx context.Context, dir string) (*Spec, []string, error) {
	packs, err := Versions()
	if err != nil {
		return nil, nil, err
	}
	files, err := NPMPack(ctx, dir, packs)
	if err != nil {
		return nil, nil, err
	}
	return Extract(packs, files)
}
