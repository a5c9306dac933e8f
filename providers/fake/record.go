package fake

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Call is one call the host made on the fake, as recorded: what was asked,
// never an environment value (EnvNames only; values are kept apart, for
// Leaks alone).
type Call struct {
	Op       string            // "Create", "Exec", "WriteFile" ... (see Ops)
	Box      string            // the box's id; for Create, the box made (if one was)
	Argv     []string          // Exec: exactly as given
	EnvNames []string          // Exec and Create: the names of the env given, sorted
	Dir      string            // Exec: the working directory as given
	Stdin    []byte            // Exec: the bytes read from the caller's stdin, growing while it runs
	Path     string            // file ops: the box path; Rename and Link: the old name
	Target   string            // Rename and Link: the new name; Symlink: the link's target
	Size     int64             // bytes written, read or asked for; Truncate: the size
	Labels   map[string]string // Create and List: the labels given
	Image    string            // Create: the spec's image
	Time     time.Time         // the fake clock when the call came in
	Code     providers.Code    // how the call ended: 0 for success, else its error's code
}

// record is a Call plus what Leaks looks at but Calls never shows.
type record struct {
	Call
	env     map[string]string // values of the env given
	content []byte            // bytes sent as file content (WriteFile, WriteAt, PutArchive)
}

func (r *record) clone() Call {
	c := r.Call
	c.Argv = slices.Clone(c.Argv)
	c.EnvNames = slices.Clone(c.EnvNames)
	c.Stdin = slices.Clone(c.Stdin)
	c.Labels = maps.Clone(c.Labels)
	return c
}

func envNames(env map[string]string) []string {
	if len(env) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(env))
}

// record appends a call to the log.
func (p *Provider) record(c Call, env map[string]string, content []byte) *record {
	r := &record{Call: c, env: maps.Clone(env), content: slices.Clone(content)}
	r.EnvNames = envNames(env)
	r.Time = p.clock.Now()
	p.mu.Lock()
	p.calls = append(p.calls, r)
	p.mu.Unlock()
	return r
}

// done sets how a recorded call ended.
func (p *Provider) done(r *record, err error) {
	if r == nil {
		return
	}
	p.mu.Lock()
	r.Code = providers.CodeOf(err)
	p.mu.Unlock()
}

// Calls returns every call recorded so far, in the order they came in.
func (p *Provider) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Call, len(p.calls))
	for i, r := range p.calls {
		out[i] = r.clone()
	}
	return out
}

// CallsOf returns the recorded calls with the given op, in order.
func (p *Provider) CallsOf(op string) []Call {
	var out []Call
	for _, c := range p.Calls() {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// ResetCalls forgets the calls recorded so far.
func (p *Provider) ResetCalls() {
	p.mu.Lock()
	p.calls = nil
	p.mu.Unlock()
}

// Leaks reports every place where marker appears in what the host sent:
// argv, env names and env values (which Calls never shows), stdin, file
// contents written, paths, labels, images and working directories. Each
// entry reads "call 3 Exec fake-1: env TOKEN". It returns nil when marker
// appears nowhere, and for an empty marker.
func (p *Provider) Leaks(marker string) []string {
	if marker == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for i, r := range p.calls {
		where := func(field string) {
			s := fmt.Sprintf("call %d %s", i, r.Op)
			if r.Box != "" {
				s += " " + r.Box
			}
			out = append(out, s+": "+field)
		}
		for j, a := range r.Argv {
			if strings.Contains(a, marker) {
				where(fmt.Sprintf("argv[%d]", j))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(r.env)) {
			if strings.Contains(k, marker) {
				where("env name " + k)
			}
			if strings.Contains(r.env[k], marker) {
				where("env " + k)
			}
		}
		if strings.Contains(string(r.Stdin), marker) {
			where("stdin")
		}
		if strings.Contains(string(r.content), marker) {
			where("content")
		}
		for _, f := range []struct{ name, v string }{{"path", r.Path}, {"target", r.Target}, {"dir", r.Dir}, {"image", r.Image}} {
			if strings.Contains(f.v, marker) {
				where(f.name)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
			if strings.Contains(k, marker) || strings.Contains(r.Labels[k], marker) {
				where("label " + k)
			}
		}
	}
	return out
}
