package agent

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/boxfs/boxfs/providers"
)

// CheckLoader tells whether the box can run the agent binary at binary
// before the channel uploads it there. A static binary runs in any Linux
// box. A dynamic one (boxfs built with cgo on) runs where the box has its
// interpreter and a GNU C library at least as new as it needs: the
// interpreter is asked its version (one exec, "INTERP --version", which
// needs no shell), and the answer compared with the binary's newest
// GLIBC_ symbol version. A box with musl (Alpine), with no C library, or
// with an older glibc gets an Unsupported error saying why and how to
// build a static boxfs; the caller then reaches the box without the
// agent. When installedAt is where an earlier open of this same binary
// ran it in the box (ChannelOptions.InstalledAt), nothing is asked.
// onExec, when set, is told of the exec.
func CheckLoader(ctx context.Context, box providers.Box, binary, installedAt string, onExec func(error)) error {
	const op = "agent.CheckLoader"
	bin, err := readBinaryInfo(binary)
	if err != nil {
		return providers.E(providers.Invalid, op, err)
	}
	if bin.interp == "" || path.Base(installedAt) == ".boxfs-agent-"+bin.sha256[:16] {
		return nil
	}
	var out, stderr bytes.Buffer
	proc, err := box.Exec(ctx, providers.ExecRequest{
		Argv:   []string{bin.interp, "--version"},
		Dir:    "/",
		Stdout: &capped{&out, 4096},
		Stderr: &capped{&stderr, 4096},
	})
	if onExec != nil {
		onExec(err)
	}
	var code int
	if err == nil {
		code, err = proc.Wait()
	}
	if err != nil {
		if providers.CodeOf(err) == providers.NotFound {
			return loaderError(op, bin, "the box has no %s", bin.interp)
		}
		return providers.E(0, op, err)
	}
	have := glibcVersion(out.String())
	switch {
	case code == 126 || code == 127:
		return loaderError(op, bin, "the box has no %s", bin.interp)
	case have == "":
		return loaderError(op, bin, "%s in the box is not the GNU C library's (it said %q)", bin.interp, firstLine(out.String()+stderr.String()))
	case versionLess(have, bin.glibc):
		return loaderError(op, bin, "the box's GNU C library is %s, older than the %s the binary needs", have, bin.glibc)
	}
	return nil
}

func loaderError(op string, bin binaryInfo, format string, args ...any) error {
	why := fmt.Sprintf(format, args...)
	return providers.Errorf(providers.Unsupported, op,
		"this boxfs is dynamically linked (built with cgo) and cannot run as the agent in this box: %s; build it with CGO_ENABLED=0 go build ./cmd/boxfs for an agent that runs in any Linux box", why)
}

// glibcRE finds the version in what glibc's ld.so --version prints:
// "ld.so (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36." (the
// first line of every glibc since 2.0 says "version X.Y").
var glibcRE = regexp.MustCompile(`(?i)^ld\.so \(.*\) .*release version (\d+\.\d+)`)

// glibcVersion returns the glibc version an interpreter's --version
// printed, or "" when it is not glibc's.
func glibcVersion(out string) string {
	m := glibcRE.FindStringSubmatch(firstLine(out))
	if m == nil {
		return ""
	}
	return m[1]
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// capped writes at most n bytes to w and drops the rest.
type capped struct {
	w *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.w.Len(); room > 0 {
		c.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
