// Package archil runs boxes as directories of an Archil work disk: every
// command is one serverless exec call, and files move through the disk's
// S3-style object API.
//
// A box is the directory boxes/<id>/ of the disk. Its labels, measured
// facts and end time are in the object boxes.records/<id>.json, outside
// every directory a command works in, so attach and list work from any
// process, and deleting the record ends the box for every client at once.
// Each command runs in a fresh VM container with the disk mounted (no
// process outlives its command, and nothing but files persists), under a
// fixed wrapper that takes the box's checkout (one command at a time per
// box across processes), runs the command as its own process group with
// its own deadline, and writes its output and status to objects under
// boxes.cmds/<id>/, which is how output that is not text comes back
// exactly. Disks have no lifetime of their own: a box past its lifetime is
// ended by the first call that looks at it, and by its running command's
// own deadline. The disk is shared by every box on it.
//
// The API key comes from the "api_key" option or ARCHIL_API_KEY. It is
// sent in the Authorization header to the control plane and to the object
// API, and nowhere else.
package archil

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/internal/probe"
)

// Name is the provider's registry name.
const Name = "archil"

// Control-plane bases by region, as the vendor's client has them.
var regionURLs = map[string]string{
	"aws-us-east-1":   "https://control.green.us-east-1.aws.prod.archil.com",
	"aws-us-west-2":   "https://control.green.us-west-2.aws.prod.archil.com",
	"aws-eu-west-1":   "https://control.green.eu-west-1.aws.prod.archil.com",
	"gcp-us-central1": "https://control.blue.us-central1.gcp.prod.archil.com",
}

// Defaults and bounds.
const (
	// MaxExec is the platform's bound on one exec call's container: the
	// vendor's spec gives about 30 s, and a command still running then
	// is cut off with 504 "Command timed out", its output lost. It is the
	// default of the max_exec option and the most it takes.
	MaxExec = 30 * time.Second
	// DefaultQueueWait bounds how long a command waits for the box's
	// checkout held by another process.
	DefaultQueueWait = 60 * time.Second
	// execMargin is how far inside the platform's limit a command's own
	// deadline falls, so that its output and status are written.
	execMargin = 5 * time.Second
	// The exec VM's size: more is refused.
	maxCPUs     = 2
	maxMemoryMB = 3938
	// diskBound bounds the wait for a new disk to be available.
	diskBound = 3 * time.Minute
)

func init() {
	providers.Register(Name, func(cfg providers.Config) (providers.Provider, error) { return New(cfg) })
}

// Provider makes boxes as directories of one work disk.
type Provider struct {
	c          *client
	region     string
	diskRef    string // the work disk's id ("dsk-...") or name
	createDisk bool
	maxExec    time.Duration
	queueWait  time.Duration
	log        *slog.Logger
	now        func() time.Time // the host's clock, for lifetimes

	mu     sync.Mutex
	diskID string // resolved on first use

	boxes sync.Map // id -> *boxState, shared by every Box value of this process
}

var _ providers.Provider = (*Provider)(nil)

// New opens the provider. Options:
//
//	api_key      the API key (default: ARCHIL_API_KEY)
//	region       the disk's region (default: ARCHIL_REGION, else aws-us-east-1);
//	             exec runs only in the aws-* regions
//	disk         the work disk, by id (dsk-...) or name (default: ARCHIL_DISK)
//	create_disk  "true": create the disk by that name when it does not exist
//	api_url      the control plane (default: the region's)
//	s3_url       the object API (default: ARCHIL_S3_BASE_URL, else the control
//	             plane's host with "control." turned to "s3.")
//	max_exec     the platform's limit on one command (default and most: 30s,
//	             the vendor's bound; less gives commands less)
//	queue_wait   how long a command waits for another process's (default 60s)
//
// A missing key is Auth. New does not contact Archil.
func New(cfg providers.Config) (*Provider, error) {
	const op = "archil.New"
	o := cfg.Options
	if err := providers.CheckOptions(op, o, "api_key", "region", "disk", "create_disk", "api_url", "s3_url", "max_exec", "queue_wait"); err != nil {
		return nil, err
	}
	opt := func(k, env string) string {
		if v := o[k]; v != "" {
			return v
		}
		if env != "" {
			return os.Getenv(env)
		}
		return ""
	}
	key := strings.TrimPrefix(opt("api_key", "ARCHIL_API_KEY"), "key-")
	if key == "" {
		return nil, providers.Errorf(providers.Auth, op, "no API key: set the api_key option or ARCHIL_API_KEY")
	}
	region := opt("region", "ARCHIL_REGION")
	if region == "" {
		region = "aws-us-east-1"
	}
	rawAPI := opt("api_url", "")
	if rawAPI == "" {
		rawAPI = regionURLs[region]
		if rawAPI == "" {
			return nil, providers.Errorf(providers.Invalid, op, "unknown region %q (known: aws-us-east-1, aws-us-west-2, aws-eu-west-1, gcp-us-central1)", region)
		}
	}
	api, err := checkURL(op, "api_url", rawAPI)
	if err != nil {
		return nil, err
	}
	rawS3 := opt("s3_url", "ARCHIL_S3_BASE_URL")
	if rawS3 == "" {
		u := *api
		u.Host = strings.Replace(u.Host, "control.", "s3.", 1)
		if !strings.HasPrefix(api.Hostname(), "control.") {
			return nil, providers.Errorf(providers.Invalid, op, "api_url %q is not a control.* host: set s3_url", rawAPI)
		}
		rawS3 = u.String()
	}
	s3, err := checkURL(op, "s3_url", rawS3)
	if err != nil {
		return nil, err
	}
	disk := opt("disk", "ARCHIL_DISK")
	if disk == "" {
		return nil, providers.Errorf(providers.Invalid, op, "no work disk: set the disk option (an id dsk-... or a name) or ARCHIL_DISK")
	}
	if !diskIDRE.MatchString(disk) && !diskNameRE.MatchString(disk) {
		return nil, providers.Errorf(providers.Invalid, op, "disk %q is neither a disk id (dsk- and 16 hex digits) nor a disk name ([A-Za-z0-9_-])", disk)
	}
	p := &Provider{region: region, diskRef: disk, createDisk: o["create_disk"] == "true", maxExec: MaxExec, queueWait: DefaultQueueWait, log: cfg.Logger, now: time.Now}
	if v := o["create_disk"]; v != "" && v != "true" && v != "false" {
		return nil, providers.Errorf(providers.Invalid, op, "create_disk=%q: want true or false", v)
	}
	if p.maxExec, err = durationOption(op, o, "max_exec", MaxExec); err != nil {
		return nil, err
	}
	if p.maxExec <= execMargin || p.maxExec > MaxExec {
		return nil, providers.Errorf(providers.Invalid, op, "max_exec %v must be over %v and at most %v, the platform's bound on one command", p.maxExec, execMargin, MaxExec)
	}
	if p.queueWait, err = durationOption(op, o, "queue_wait", DefaultQueueWait); err != nil {
		return nil, err
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	p.c = &client{hc: &http.Client{Transport: tr}, api: api, s3: s3, key: key, log: p.log}
	return p, nil
}

var (
	diskIDRE   = regexp.MustCompile(`^dsk-[0-9a-f]{16}$`)
	diskNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	boxIDRE    = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

func checkURL(op, name, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme != "https" && u.Scheme != "http" {
		return nil, providers.Errorf(providers.Invalid, op, "%s=%q is not an http(s) URL", name, raw)
	}
	if u.Scheme == "http" && !loopback(u.Host) {
		return nil, providers.Errorf(providers.Invalid, op, "%s=%q: the key would travel unencrypted; use https", name, raw)
	}
	return u, nil
}

func loopback(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}

func durationOption(op string, o map[string]string, k string, def time.Duration) (time.Duration, error) {
	v := o[k]
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, providers.Errorf(providers.Invalid, op, "option %s=%q is not a positive duration", k, v)
	}
	return d, nil
}

// Name returns "archil".
func (p *Provider) Name() string { return Name }

// execEnabled reports whether the region runs commands (the AWS ones).
func (p *Provider) execEnabled() bool { return strings.HasPrefix(p.region, "aws-") }

// diskResponse is the part of the vendor's DiskResponse the provider reads.
type diskResponse struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Region string `json:"region"`
}

// disk returns the work disk's id, finding it (or creating it, when the
// configuration says so) on first use and waiting until it is available.
func (p *Provider) disk(ctx context.Context) (string, error) {
	const op = "archil.disk"
	p.mu.Lock()
	id := p.diskID
	p.mu.Unlock()
	if id != "" {
		return id, nil
	}
	d, err := p.findDisk(ctx)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(diskBound)
	for d.Status != "available" {
		switch {
		case d.Status == "failed" || d.Status == "deleting" || d.Status == "deleted":
			return "", providers.Errorf(providers.Refused, op, "work disk %s (%s) is %s", d.ID, d.Name, d.Status)
		case time.Now().After(deadline):
			return "", providers.Errorf(providers.Timeout, op, "work disk %s still %s after %v", d.ID, d.Status, diskBound)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return "", wrap(op, "", err)
		}
		if _, err := p.c.control(ctx, http.MethodGet, "/api/disks/"+d.ID, nil, nil, &d, true); err != nil {
			return "", wrap(op, "", err)
		}
	}
	p.mu.Lock()
	p.diskID = d.ID
	p.mu.Unlock()
	return d.ID, nil
}

// findDisk reads the work disk by id, or by name (creating it if asked).
func (p *Provider) findDisk(ctx context.Context) (diskResponse, error) {
	const op = "archil.disk"
	var d diskResponse
	if diskIDRE.MatchString(p.diskRef) {
		if _, err := p.c.control(ctx, http.MethodGet, "/api/disks/"+p.diskRef, nil, nil, &d, true); err != nil {
			return d, wrap(op, "", err)
		}
		return d, nil
	}
	var ds []diskResponse
	if _, err := p.c.control(ctx, http.MethodGet, "/api/disks", url.Values{"name": {p.diskRef}}, nil, &ds, true); err != nil {
		return d, wrap(op, "", err)
	}
	for _, x := range ds {
		if x.Name == p.diskRef {
			return x, nil
		}
	}
	if !p.createDisk {
		return d, providers.Errorf(providers.NotFound, op, "no disk named %q (set create_disk=true to create it)", p.diskRef)
	}
	// Create is idempotent by name: 201 made, 200 made before alike.
	var made struct {
		DiskID string `json:"diskId"`
	}
	if _, err := p.c.control(ctx, http.MethodPost, "/api/disks", nil, map[string]string{"name": p.diskRef}, &made, true); err != nil {
		return d, wrap(op, "", err)
	}
	if !diskIDRE.MatchString(made.DiskID) {
		return d, providers.Errorf(providers.Unknown, op, "the create answered disk id %q", made.DiskID)
	}
	p.log.Info("archil: created the work disk", "disk", made.DiskID, "name", p.diskRef)
	if _, err := p.c.control(ctx, http.MethodGet, "/api/disks/"+made.DiskID, nil, nil, &d, true); err != nil {
		return d, wrap(op, "", err)
	}
	return d, nil
}

// supported are the spec fields Create honours, within the checks of
// checkSpec.
var supported = []string{"region", "lifetime", "cpus", "memoryMb", "isolation", "labels"}

// checkSpec refuses what the exec model cannot honour, before any call.
func (p *Provider) checkSpec(op string, spec providers.Spec) error {
	if err := spec.Validate(); err != nil {
		return providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return err
	}
	switch {
	case spec.Region != "" && spec.Region != p.region:
		return providers.Errorf(providers.Unsupported, op, "region %q: the work disk is in %s", spec.Region, p.region)
	case spec.CPUs > maxCPUs:
		return providers.Errorf(providers.Unsupported, op, "cpus %v: a command's VM has %d", spec.CPUs, maxCPUs)
	case spec.MemoryMB > maxMemoryMB:
		return providers.Errorf(providers.Unsupported, op, "memoryMb %d: a command's VM has %d MiB", spec.MemoryMB, maxMemoryMB)
	case spec.Isolation != "" && spec.Isolation != providers.IsolationMicroVM:
		return providers.Errorf(providers.Unsupported, op, "isolation %q: every command runs in a VM of its own (microvm)", spec.Isolation)
	case !p.execEnabled():
		return providers.Errorf(providers.Unsupported, op, "region %s does not run commands (exec runs in the aws-* regions)", p.region)
	}
	return nil
}

// Create makes a box: its record, then its directory, measuring where the
// disk is mounted in a command's container.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "archil.Create"
	if err := p.checkSpec(op, spec); err != nil {
		return nil, err
	}
	disk, err := p.disk(ctx)
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	now := p.now()
	rec := record{ID: providers.NewID(8), Labels: spec.Labels, Created: now.UTC(), Ends: now.Add(spec.LifetimeOrDefault()).UTC()}
	if rec.Labels == nil {
		rec.Labels = map[string]string{}
	}
	b := p.newBox(disk, rec)
	// A failed create removes what it made; its error names the box
	// only when that failed too, so the box is left behind.
	fail := func(err error) (providers.Box, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := b.Destroy(rctx); derr != nil {
			p.log.Warn("archil: removing a box whose create failed", "box", rec.ID, "err", derr)
			return nil, wrap(op, rec.ID, err)
		}
		return nil, wrap(op, "", err)
	}
	if err := b.putRecord(ctx); err != nil {
		return fail(err)
	}
	out, err := p.maintain(ctx, disk, b.st, op, "mkdir -p -- \""+boxesDir+"/"+rec.ID+"\" \""+cmdsDir+"/"+rec.ID+"\" && pwd && uname -m && command -v bash")
	if err != nil {
		return fail(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "/") {
		return fail(providers.Errorf(providers.Unknown, op, "the create command printed %q", out))
	}
	b.rec.Root, b.rec.Arch, b.rec.Shell = strings.TrimSuffix(lines[0], "/"), probe.GoArch(lines[1]), lines[2]
	if err := b.putRecord(ctx); err != nil {
		return fail(err)
	}
	return b, nil
}

// Attach finds a box by id. A box whose record is gone, or whose lifetime
// has passed (it is ended now), is NotFound.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "archil.Attach"
	if !boxIDRE.MatchString(id) {
		return nil, providers.Errorf(providers.NotFound, op, "%q is not an archil box id", id).WithBox(id)
	}
	disk, err := p.disk(ctx)
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	rec, err := p.readRecord(ctx, disk, id)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return nil, providers.Errorf(providers.NotFound, op, "no box %s on the work disk", id).WithBox(id)
		}
		return nil, wrap(op, id, err)
	}
	b := p.newBox(disk, rec)
	if b.expired() {
		b.endLazily(ctx, true)
		return nil, providers.Errorf(providers.NotFound, op, "box %s ended at %s, its lifetime", id, rec.Ends.Format(time.RFC3339)).WithBox(id)
	}
	return b, nil
}

// List returns the boxes whose records carry every label in labels. Boxes
// past their lifetime are ended on the way, and box directories without a
// record (a destroy that stopped half way) are removed.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "archil.List"
	disk, err := p.disk(ctx)
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	ids := map[string]bool{}
	err = p.c.list(ctx, disk, recordsDir+"/", false, func(key string, _ bool) error {
		id, ok := strings.CutSuffix(strings.TrimPrefix(key, recordsDir+"/"), ".json")
		if ok && boxIDRE.MatchString(id) {
			ids[id] = true
		}
		return nil
	})
	if err != nil {
		return nil, wrap(op, "", err)
	}
	var out []providers.Box
	for id := range ids {
		rec, err := p.readRecord(ctx, disk, id)
		if statusOf(err) == http.StatusNotFound {
			delete(ids, id)
			continue
		}
		if err != nil {
			return nil, wrap(op, id, err)
		}
		b := p.newBox(disk, rec)
		if b.expired() {
			b.endLazily(ctx, true)
			delete(ids, id)
			continue
		}
		if providers.MatchLabels(rec.Labels, labels) {
			out = append(out, b)
		}
	}
	p.sweep(ctx, disk, ids)
	return out, nil
}

// sweep removes the box directories that have no record, in one command.
func (p *Provider) sweep(ctx context.Context, disk string, live map[string]bool) {
	var orphans []string
	for _, dir := range []string{boxesDir, cmdsDir} {
		err := p.c.list(ctx, disk, dir+"/", true, func(key string, prefix bool) error {
			id := strings.TrimSuffix(strings.TrimPrefix(key, dir+"/"), "/")
			if prefix && boxIDRE.MatchString(id) && !live[id] {
				orphans = append(orphans, dir+"/"+id)
			}
			return nil
		})
		if err != nil {
			p.log.Warn("archil: listing box directories to sweep", "err", err)
			return
		}
	}
	if len(orphans) == 0 {
		return
	}
	// A record may have been written since the listing: check again in
	// the command itself.
	// Each is checked out before it is removed, as a shared disk needs.
	var sb strings.Builder
	sb.WriteString(ownScript)
	for _, o := range orphans {
		id := o[strings.LastIndexByte(o, '/')+1:]
		sb.WriteString("[ -e " + recordsDir + "/" + id + ".json ] || { own " + o + " && rm -rf -- " + o + "; }\n")
	}
	sb.WriteString("true\n")
	if _, err := p.maintain(ctx, disk, nil, "archil.List", sb.String()); err != nil {
		p.log.Warn("archil: removing box directories without a record", "dirs", orphans, "err", err)
	}
}

// ownScript defines own PATH...: the archil client's checkout of each
// path, which a change on a shared disk needs (the client is in every
// exec container of a shared mount); without the client, nothing.
const ownScript = `own() {
	command -v archil >/dev/null || return 0
	for p; do archil checkout "$PWD/$p" || return 1; done
}
`

// readRecord reads a box's record.
func (p *Provider) readRecord(ctx context.Context, disk, id string) (record, error) {
	var rec record
	resp, err := p.c.getObject(ctx, disk, recordKey(id), nil)
	if err != nil {
		return rec, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(limitReader(resp.Body, recordMax)).Decode(&rec); err != nil {
		return rec, providers.Errorf(providers.Unknown, "archil.readRecord", "the record of box %s is not JSON: %v", id, err)
	}
	if rec.ID != id {
		return rec, providers.Errorf(providers.Unknown, "archil.readRecord", "the record of box %s names box %q", id, rec.ID)
	}
	return rec, nil
}

// boxState is what every Box value of one box shares in this process.
func (p *Provider) state(id string) *boxState {
	st, _ := p.boxes.LoadOrStore(id, newBoxState())
	return st.(*boxState)
}
