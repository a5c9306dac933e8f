package daytona

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/probe"
)

// Box is one sandbox.
//
// Besides providers.Box it serves, without running a command where the
// toolbox answers exactly: Stat (files/info, which follows symlinks and
// gives mode, size, mtime and owner), ReadFile and ReadAt (files/download),
// WriteFile of a new file (upload to a temporary name, then move), Rename
// (move, within one directory, the new name free), Remove (delete), Mkdir (folder, when
// the parent exists and the name is free), Chmod and Chown (permissions).
// Lstat, ReadDir and Walk run one fixed find script over process/execute
// (the toolbox's own listing follows symlinks and drops dangling ones);
// PutArchive and GetArchive move a tar through upload or download and one
// tar command. Where the toolbox cannot settle an answer exactly (a
// failure it does not explain, a special mode bit, a name that is taken),
// these methods change nothing and return Unsupported, so that a caller
// (hands) can answer with its own scripts.
type Box struct {
	p         *Provider
	id        string
	name      string
	labels    map[string]string
	workspace string

	destroyed atomic.Bool

	mu       sync.Mutex
	toolbox  string // the toolbox's base for this sandbox: <proxy>/<id>
	dto      sandboxDTO
	measured *measured // what the facts script found, once
}

var _ providers.Box = (*Box)(nil)

func (p *Provider) newBox(dto sandboxDTO) (*Box, error) {
	ws := dto.Labels[labelWorkspace]
	if ws == "" {
		ws = DefaultWorkspace
	}
	labels := make(map[string]string, len(dto.Labels))
	for k, v := range dto.Labels {
		labels[k] = v
	}
	b := &Box{p: p, id: dto.ID, name: dto.Name, labels: labels, workspace: ws, dto: dto}
	if dto.ToolboxProxyURL != "" {
		if err := b.setToolbox(dto.ToolboxProxyURL); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// setToolbox checks and keeps the toolbox proxy's URL: the key goes there,
// so it must be TLS or the control plane's own origin.
func (b *Box) setToolbox(proxy string) error {
	u, err := url.Parse(strings.TrimSuffix(proxy, "/"))
	if err != nil || u.Host == "" {
		return fmt.Errorf("daytona: the toolbox proxy URL %q is not a URL", proxy)
	}
	if !b.p.c.trusted(u) {
		return fmt.Errorf("daytona: the toolbox proxy %s://%s is neither https nor the API's own origin; the key is not sent there", u.Scheme, u.Host)
	}
	b.mu.Lock()
	b.toolbox = u.String() + "/" + url.PathEscape(b.id)
	b.mu.Unlock()
	return nil
}

func (b *Box) setDTO(dto sandboxDTO) {
	b.mu.Lock()
	b.dto = dto
	b.mu.Unlock()
}

// tb returns the toolbox URL of path (which starts with /), asking the
// control plane for the proxy's URL when the sandbox did not carry it.
func (b *Box) tb(ctx context.Context, path string) (string, error) {
	b.mu.Lock()
	base := b.toolbox
	b.mu.Unlock()
	if base == "" {
		var out struct {
			URL string `json:"url"`
		}
		if err := b.p.c.json(ctx, request{method: http.MethodGet, url: b.p.c.apiURL("/sandbox/" + url.PathEscape(b.id) + "/toolbox-proxy-url"), idempotent: true}, &out); err != nil {
			return "", err
		}
		if err := b.setToolbox(out.URL); err != nil {
			return "", err
		}
		b.mu.Lock()
		base = b.toolbox
		b.mu.Unlock()
	}
	return base + path, nil
}

// ID returns the sandbox's id.
func (b *Box) ID() string { return b.id }

// Labels returns the sandbox's labels: the caller's and the provider's.
func (b *Box) Labels() map[string]string {
	out := make(map[string]string, len(b.labels))
	for k, v := range b.labels {
		out[k] = v
	}
	return out
}

func (b *Box) gone(op string) error {
	if b.destroyed.Load() {
		return providers.Errorf(providers.Gone, op, "box was destroyed").WithBox(b.id)
	}
	return nil
}

// read reads the sandbox; one that is no longer there is Gone.
func (b *Box) read(ctx context.Context, op string) (sandboxDTO, error) {
	dto, err := b.p.get(ctx, b.id)
	if err != nil {
		e := wrap(op, b.id, err)
		if statusOf(err) == http.StatusNotFound {
			e.Code = providers.Gone
		}
		return dto, e
	}
	if dto.deleted() {
		return dto, providers.Errorf(providers.Gone, op, "sandbox is deleted (state %s)", dto.State).WithBox(b.id)
	}
	b.setDTO(dto)
	return dto, nil
}

// Status reads the sandbox's state. A sandbox that was deleted (its
// lifetime passed, or Destroy) is Gone.
func (b *Box) Status(ctx context.Context) (providers.Status, error) {
	const op = "daytona.Status"
	if err := b.gone(op); err != nil {
		return providers.Status{}, err
	}
	dto, err := b.read(ctx, op)
	if err != nil {
		return providers.Status{}, err
	}
	return boxState(dto), nil
}

// ended reports whether the box is known to have gone or ended; a failure
// to tell is not an end.
func (b *Box) ended(ctx context.Context) bool {
	if b.destroyed.Load() {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.p.liveness)
	defer cancel()
	st, err := b.Status(ctx)
	return providers.IsCode(err, providers.Gone) || err == nil && st.State == providers.StateEnded
}

// Destroy deletes the sandbox and everything running in it. One that is
// already gone is not an error; one whose state is changing (Daytona
// refuses to delete it then) is deleted once the change is done, within
// the create's bound.
func (b *Box) Destroy(ctx context.Context) error {
	const op = "daytona.Destroy"
	ctx, cancel := context.WithTimeout(ctx, b.p.cleanupBound())
	defer cancel()
	if err := b.p.delete(ctx, op, b.id); err != nil {
		return wrap(op, b.id, err)
	}
	b.destroyed.Store(true)
	b.p.destroyed.Store(b.id, true)
	return nil
}

// KeepAlive tells Daytona the box is in use, so that its idle auto-stop
// (which deletes it) does not come. A running command does this by
// itself; a mount that is busy without running commands calls it.
func (b *Box) KeepAlive(ctx context.Context) error {
	const op = "daytona.KeepAlive"
	if err := b.gone(op); err != nil {
		return err
	}
	err := b.p.c.json(ctx, request{method: http.MethodPost, url: b.p.c.apiURL("/sandbox/" + url.PathEscape(b.id) + "/last-activity"), idempotent: true}, nil)
	if err != nil {
		e := wrap(op, b.id, err)
		if statusOf(err) == http.StatusNotFound {
			e.Code = providers.Gone
		}
		return e
	}
	return nil
}

// measured is what the box reports of itself (probe.Script).
type measured struct {
	arch  string
	shell string
}

// Facts reports the box: the sandbox's size, network and start as Daytona
// reads them back, its architecture and shell as measured in it once.
func (b *Box) Facts(ctx context.Context) (providers.Facts, error) {
	const op = "daytona.Facts"
	if err := b.gone(op); err != nil {
		return providers.Facts{}, err
	}
	dto, err := b.read(ctx, op)
	if err != nil {
		return providers.Facts{}, err
	}
	b.mu.Lock()
	m := b.measured
	b.mu.Unlock()
	if m == nil {
		code, out, err := b.run(ctx, op, probe.Script, nil, runOpts{idempotent: true})
		if err != nil {
			return providers.Facts{}, err
		}
		if code != 0 {
			return providers.Facts{}, providers.Errorf(providers.Unknown, op, "facts script exited %d: %s", code, strings.TrimSpace(string(out))).WithBox(b.id)
		}
		// Daytona reports the size itself: only the architecture and the
		// shell are taken from the box's report.
		var pf providers.Facts
		if err := probe.Read(out, &pf); err != nil {
			return providers.Facts{}, providers.E(0, op, err).WithBox(b.id)
		}
		m = &measured{arch: pf.Arch, shell: pf.Shell}
		b.mu.Lock()
		b.measured = m
		b.mu.Unlock()
	}
	f := providers.Facts{
		Provider:      Name,
		ID:            b.id,
		Isolation:     providers.IsolationContainer,
		OS:            "linux",
		Arch:          m.arch,
		Workspace:     b.workspace,
		TmpDir:        tmpDir,
		Shell:         m.shell,
		CPUs:          dto.CPU,
		MemoryMB:      int(dto.Memory * 1024),
		DiskGB:        dto.Disk,
		Network:       networkOf(dto),
		Ports:         []int{},
		LiveProcesses: providers.Bool(true),
		Stdin:         providers.Bool(false), // stdin is uploaded whole before a command starts
		StartedAt:     time.Time(dto.CreatedAt),
		Suspend:       providers.SuspendFilesystem,
	}
	if dto.SandboxClass == "linux-vm" {
		f.Isolation = providers.IsolationMicroVM
	}
	if dto.GPU > 0 {
		f.GPU = "any"
	}
	return f, nil
}
