// Package safetar extracts tar streams that come from an untrusted box into
// one host directory, so that nothing the box sends can write outside it.
//
// Only regular files and directories are written. Links, devices, fifos and
// anything else are skipped and counted by reason (a link's target kept in
// the skip record); so are unsafe names, a second member of one path and pax
// global headers. Every directory is opened from a held handle of its parent
// with O_NOFOLLOW, so a link already in the destination is never followed,
// and a file never replaces a directory or the reverse. Each file is written
// under a temporary name in its directory and renamed into place, so a file
// is either whole or absent. Modes are capped (see CapMode). A malformed
// archive (bad checksum, a lone zero block, truncation) or a limit stops the
// extraction cleanly: every file written before it is whole, and the Receipt
// says why it stopped.
package safetar

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Default limits.
const (
	DefaultMaxBytes   = 1 << 30 // member data of the whole archive
	DefaultMaxEntries = 100_000 // members, skipped ones included
	DefaultMaxHeader  = 64 << 10
)

// Name limits: a segment as NAME_MAX, a path as PATH_MAX less its NUL.
const (
	MaxSegment = 255
	MaxPath    = 4095
)

// Options tune an extraction. The zero value is safe: default limits, every
// member taken, existing files replaced.
type Options struct {
	// MaxBytes bounds the member data of the whole archive, written or
	// skipped (0: DefaultMaxBytes).
	MaxBytes int64
	// MaxEntries bounds the number of members, skipped ones included (0:
	// DefaultMaxEntries).
	MaxEntries int
	// MaxHeader bounds the extended header data of one member, its pax
	// records and GNU long names together, rounded up to whole blocks (0:
	// DefaultMaxHeader).
	MaxHeader int
	// Strip is a leading path taken off every member name, whole segments
	// only: with Strip "src", member "src/a/b" lands at dst/a/b and member
	// "src" is dst itself. Members not under Strip are skipped
	// (ReasonOutsideStrip). Strip "." takes the "./" of `tar -C dir .` off.
	Strip string
	// Filter, if set, is asked for every member's relative path (after
	// Strip and the name checks, whatever the member's type); false skips
	// it (ReasonFiltered, counted only, not listed).
	Filter func(rel string) bool
	// Overwrite, if set, is asked before a file member replaces something
	// that already exists at its path (a file, a link, a fifo; never a
	// directory, which a file never replaces); false skips the member
	// (ReasonRefused). A cache uses it to keep a dirty file.
	Overwrite func(rel string) bool
}

func (o Options) withDefaults() Options {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxHeader <= 0 {
		o.MaxHeader = DefaultMaxHeader
	}
	o.Strip = strings.Trim(o.Strip, "/")
	return o
}

// Reason is why a member was skipped.
type Reason string

// Skip reasons.
const (
	ReasonSymlink      Reason = "symlink"       // a symbolic link (Target kept)
	ReasonHardlink     Reason = "hardlink"      // a hard link (Target kept)
	ReasonDevice       Reason = "device"        // a character or block device
	ReasonFifo         Reason = "fifo"          // a named pipe
	ReasonOtherType    Reason = "other_type"    // any other member type
	ReasonPAXGlobal    Reason = "pax_global"    // a pax global header: never honoured
	ReasonBadName      Reason = "bad_name"      // absolute, empty, NUL, ".", ".." or an empty segment
	ReasonNameTooLong  Reason = "name_too_long" // a segment over MaxSegment or a path over MaxPath bytes
	ReasonOutsideStrip Reason = "outside_strip" // not under Options.Strip
	ReasonDuplicate    Reason = "duplicate"     // a second member of one path
	ReasonTypeConflict Reason = "type_conflict" // a file where a directory is, or the reverse
	ReasonThroughLink  Reason = "through_link"  // a parent in the destination is a link: never followed
	ReasonParentNotDir Reason = "parent_not_dir"
	ReasonRefused      Reason = "refused"  // Options.Overwrite said no
	ReasonFiltered     Reason = "filtered" // Options.Filter said no
)

// Stop is why an extraction ended before the archive's end.
type Stop string

// Stop reasons. The empty Stop means the archive ended properly.
const (
	StopBadChecksum    Stop = "bad_checksum"     // a header's checksum does not match
	StopBadHeader      Stop = "bad_header"       // a header that is not tar
	StopLoneZeroBlock  Stop = "lone_zero_block"  // one zero block, then data or the end
	StopTruncated      Stop = "truncated"        // the stream ended inside a member or without its end marker
	StopTooLarge       Stop = "too_large"        // MaxBytes
	StopTooManyEntries Stop = "too_many_entries" // MaxEntries
	StopHeaderTooLarge Stop = "header_too_large" // MaxHeader
	StopAborted        Stop = "aborted"          // ctx ended
	StopWriteFailed    Stop = "write_failed"     // the host refused a write (disk full, permission)
	StopReadFailed     Stop = "read_failed"      // the stream itself failed
)

// Written is one member written to the destination.
type Written struct {
	Path   string      `json:"path"` // relative, slash-separated
	Dir    bool        `json:"dir,omitempty"`
	Size   int64       `json:"size"`
	Mode   fs.FileMode `json:"mode"`             // the capped permissions it got
	Mtime  time.Time   `json:"mtime"`            // from the header (files only)
	SHA256 string      `json:"sha256,omitempty"` // hex, files only
}

// Skip is one member not written.
type Skip struct {
	Path   string `json:"path"` // the member's name as the archive gave it (after Strip where it applied)
	Reason Reason `json:"reason"`
	Target string `json:"target,omitempty"` // a link's target
}

// Receipt says what an extraction did.
type Receipt struct {
	Written []Written `json:"written,omitempty"`
	// Skipped lists every member not written, except ReasonFiltered ones,
	// which are only counted.
	Skipped  []Skip         `json:"skipped,omitempty"`
	SkipsBy  map[Reason]int `json:"skipsBy,omitempty"` // every skip, by reason
	Files    int            `json:"files"`             // regular files written
	Dirs     int            `json:"dirs"`              // directories created or updated
	Bytes    int64          `json:"bytes"`             // file bytes written
	Masked   int            `json:"masked"`            // members whose mode was reduced by CapMode
	Entries  int            `json:"entries"`           // members read
	Stopped  Stop           `json:"stopped,omitempty"`
	Duration time.Duration  `json:"duration"`
}

// Skips returns how many members were skipped for reason.
func (r *Receipt) Skips(reason Reason) int { return r.SkipsBy[reason] }

func (r *Receipt) skip(name string, reason Reason, target string) {
	if r.SkipsBy == nil {
		r.SkipsBy = map[Reason]int{}
	}
	r.SkipsBy[reason]++
	if reason != ReasonFiltered {
		r.Skipped = append(r.Skipped, Skip{Path: name, Reason: reason, Target: target})
	}
}

// CapMode returns the permissions a member of mode gets on the host: no
// setuid, setgid or sticky bit, no group or world write, at most 0755 (so
// at most 0644 without an execute bit). Directories also keep the owner's
// rwx, so the host can always fill and clean them.
func CapMode(mode fs.FileMode, dir bool) fs.FileMode {
	m := mode.Perm() & 0o755
	if dir {
		m |= 0o700
	}
	return m
}

// CheckName checks a member's relative name: not empty, not absolute, no
// NUL, no ".", ".." or empty segment, each segment at most MaxSegment bytes
// and the whole at most MaxPath. It returns the reason it fails, or "".
func CheckName(name string) Reason {
	if name == "" || name[0] == '/' || strings.IndexByte(name, 0) >= 0 {
		return ReasonBadName
	}
	long := len(name) > MaxPath
	for seg := range strings.SplitSeq(name, "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return ReasonBadName
		case len(seg) > MaxSegment:
			long = true
		}
	}
	if long {
		return ReasonNameTooLong
	}
	return ""
}

const op = "syncengine/safetar.Extract"

// Extract reads the tar stream r and writes its regular files and
// directories under dst, which must be an existing directory. It returns
// what it did; the error is nil only when the archive ended properly (its
// end-of-archive marker read). On a stop the Receipt's Stopped says why and
// the error is an *providers.Error: Invalid for a malformed archive,
// TooLarge for a limit, Aborted or Timeout when ctx ended, and the host's
// code for a failed write. Files written before a stop are whole.
func Extract(ctx context.Context, r io.Reader, dst string, opts Options) (Receipt, error) {
	start := time.Now()
	opts = opts.withDefaults()
	var rc Receipt
	t, err := openTree(dst)
	if err != nil {
		return rc, err
	}
	defer t.close()
	x := &extractor{
		ctx:  ctx,
		opts: opts,
		t:    t,
		cr:   &countingReader{r: &ctxReader{ctx, r}},
		seen: map[string]bool{},
		rc:   &rc,
	}
	err = x.run()
	rc.Duration = time.Since(start)
	return rc, err
}

type extractor struct {
	ctx  context.Context
	opts Options
	t    *tree
	cr   *countingReader
	seen map[string]bool
	rc   *Receipt
	data int64 // member data read so far
}

func (x *extractor) stop(s Stop, code providers.Code, path string, cause error) error {
	x.rc.Stopped = s
	return &providers.Error{Code: code, Op: op, Path: path, Err: cause}
}

func (x *extractor) run() error {
	tr := tar.NewReader(x.cr)
	for {
		if err := x.ctx.Err(); err != nil {
			return x.stop(StopAborted, providers.CodeOf(err), "", err)
		}
		x.cr.beginHeader(x.opts.MaxHeader)
		hdr, err := tr.Next()
		x.cr.endHeader()
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return x.headerError(err)
		}
		x.rc.Entries++
		if x.rc.Entries > x.opts.MaxEntries {
			return x.stop(StopTooManyEntries, providers.TooLarge, hdr.Name,
				fmt.Errorf("more than %d members", x.opts.MaxEntries))
		}
		size := dataSize(hdr)
		if size < 0 || x.data+size > x.opts.MaxBytes {
			return x.stop(StopTooLarge, providers.TooLarge, hdr.Name,
				fmt.Errorf("member data over %d bytes", x.opts.MaxBytes))
		}
		x.data += size
		if err := x.member(tr, hdr); err != nil {
			return err
		}
		// Drain what the member left, so that the next header starts at a
		// known offset (and the header budget counts headers only).
		if _, err := io.Copy(io.Discard, &ctxReader{x.ctx, tr}); err != nil {
			return x.readError(hdr.Name, err)
		}
	}
}

// headerError classifies the error tar.Reader.Next returned.
func (x *extractor) headerError(err error) error {
	tail, first, second := x.cr.tail()
	switch {
	case errors.Is(err, io.EOF):
		switch {
		case tail >= 1024 && isZero(first) && isZero(second):
			return nil // the end-of-archive marker
		case tail == 512 && isZero(first):
			return x.stop(StopLoneZeroBlock, providers.Invalid, "", errors.New("archive ends after one zero block (no end marker)"))
		default:
			return x.stop(StopTruncated, providers.Invalid, "", errors.New("archive ends without its end marker"))
		}
	case errors.Is(err, errHeaderBudget):
		return x.stop(StopHeaderTooLarge, providers.TooLarge, "", fmt.Errorf("extended headers over %d bytes", x.opts.MaxHeader))
	case errors.Is(err, tar.ErrHeader):
		if tail >= 1024 && isZero(first) && !isZero(second) {
			return x.stop(StopLoneZeroBlock, providers.Invalid, "", errors.New("a zero block followed by data"))
		}
		if blk, ok := x.cr.lastBlock(); ok && !isZero(blk) && !checksumOK(blk) {
			return x.stop(StopBadChecksum, providers.Invalid, "", errors.New("header checksum mismatch"))
		}
		return x.stop(StopBadHeader, providers.Invalid, "", err)
	}
	return x.readError("", err)
}

// readError classifies an error met while reading the stream.
func (x *extractor) readError(name string, err error) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return x.stop(StopTruncated, providers.Invalid, name, io.ErrUnexpectedEOF)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return x.stop(StopAborted, providers.CodeOf(err), name, err)
	case errors.Is(err, errHeaderBudget):
		return x.stop(StopHeaderTooLarge, providers.TooLarge, name, err)
	case errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrFieldTooLong):
		return x.stop(StopBadHeader, providers.Invalid, name, err)
	}
	code := providers.CodeOf(err)
	if code == providers.Unknown {
		code = providers.TransportLost
	}
	return x.stop(StopReadFailed, code, name, err)
}

// member handles one header: skips it with a reason, or writes it.
func (x *extractor) member(tr *tar.Reader, hdr *tar.Header) error {
	name, reason := x.admit(hdr)
	if name == "" {
		return nil
	}
	if reason != "" {
		x.rc.skip(name, reason, x.linkTarget(hdr, reason))
		return nil
	}
	orig := tarMode(hdr.Mode)
	dir := hdr.Typeflag == tar.TypeDir
	mode := CapMode(orig, dir)
	masked := orig&^0o755 != 0
	parent, base := splitPath(name)
	pfd, reason, err := x.t.dir(parent, true)
	if err != nil {
		return x.stop(StopWriteFailed, providers.CodeOf(err), name, err)
	}
	if reason != "" {
		x.rc.skip(name, reason, "")
		return nil
	}
	if dir {
		return x.dir(pfd, name, base, mode, masked)
	}
	return x.file(tr, hdr, pfd, name, base, mode, masked)
}

// tarMode is a tar header's mode as a FileMode: permissions and the
// setuid, setgid and sticky bits.
func tarMode(m int64) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// admit says what becomes of a header: the stripped name it is written
// under, or the name and the reason it is skipped; "" for a member outside
// what is extracted (a global header, a name outside the strip prefix).
func (x *extractor) admit(hdr *tar.Header) (name string, reason Reason) {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		x.rc.skip(hdr.Name, ReasonPAXGlobal, "")
		return "", ""
	}
	name, ok := x.strip(hdr.Name, hdr.Typeflag == tar.TypeDir)
	if !ok {
		if name != "" {
			x.rc.skip(hdr.Name, ReasonOutsideStrip, "")
		}
		return "", ""
	}
	if reason := CheckName(name); reason != "" {
		return name, reason
	}
	if x.seen[name] {
		return name, ReasonDuplicate
	}
	x.seen[name] = true
	if x.opts.Filter != nil && !x.opts.Filter(name) {
		return name, ReasonFiltered
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir:
		return name, ""
	case tar.TypeSymlink:
		return name, ReasonSymlink
	case tar.TypeLink:
		return name, ReasonHardlink
	case tar.TypeChar, tar.TypeBlock:
		return name, ReasonDevice
	case tar.TypeFifo:
		return name, ReasonFifo
	}
	return name, ReasonOtherType
}

// linkTarget is what a link skipped for being one pointed at: a symlink's
// target, or the member a hard link names, stripped as member names are
// (a caller may copy that member's file); "" for any other skip.
func (x *extractor) linkTarget(hdr *tar.Header, reason Reason) string {
	switch reason {
	case ReasonSymlink:
		return hdr.Linkname
	case ReasonHardlink:
		if t, ok := x.strip(hdr.Linkname, false); ok {
			return t
		}
		return hdr.Linkname
	}
	return ""
}

// dir makes the directory base in pfd; masked says its mode was capped.
func (x *extractor) dir(pfd int, name, base string, mode fs.FileMode, masked bool) error {
	reason, err := x.t.mkdir(pfd, base, mode)
	if err != nil {
		return x.stop(StopWriteFailed, providers.CodeOf(err), name, err)
	}
	if reason != "" {
		x.rc.skip(name, reason, "")
		return nil
	}
	x.rc.Dirs++
	if masked {
		x.rc.Masked++
	}
	x.rc.Written = append(x.rc.Written, Written{Path: name, Dir: true, Mode: mode})
	return nil
}

// file writes the regular file base in pfd from the member's data,
// unless the caller refuses to have an existing file overwritten; masked
// says its mode was capped.
func (x *extractor) file(tr *tar.Reader, hdr *tar.Header, pfd int, name, base string, mode fs.FileMode, masked bool) error {
	exists, reason, err := x.t.checkFile(pfd, base)
	if err != nil {
		return x.stop(StopWriteFailed, providers.CodeOf(err), name, err)
	}
	if reason != "" {
		x.rc.skip(name, reason, "")
		return nil
	}
	if exists && x.opts.Overwrite != nil && !x.opts.Overwrite(name) {
		x.rc.skip(name, ReasonRefused, "")
		return nil
	}
	h := sha256.New()
	src := io.TeeReader(&ctxReader{x.ctx, tr}, h)
	n, reason, err := x.t.writeFile(pfd, base, src, hdr.Size, mode, hdr.ModTime)
	if err != nil {
		if errors.Is(err, errSource) {
			return x.readError(name, errors.Unwrap(err))
		}
		return x.stop(StopWriteFailed, providers.CodeOf(err), name, err)
	}
	if reason != "" {
		x.rc.skip(name, reason, "")
		return nil
	}
	x.rc.Files++
	x.rc.Bytes += n
	if masked {
		x.rc.Masked++
	}
	x.rc.Written = append(x.rc.Written, Written{Path: name, Size: n, Mode: mode, Mtime: hdr.ModTime,
		SHA256: hex.EncodeToString(h.Sum(nil))})
	return nil
}

// errSource marks an error of the archive stream (as opposed to the host)
// met while copying a member's data.
var errSource = errors.New("safetar: reading the archive")

type sourceError struct{ err error }

func (e sourceError) Error() string { return e.err.Error() }
func (e sourceError) Unwrap() error { return e.err }
func (e sourceError) Is(t error) bool {
	return t == errSource
}

// strip takes Options.Strip off a member name (and a directory's trailing
// slash). It returns false for the archive's root itself (name "") and for
// a name outside Strip (name set).
func (x *extractor) strip(name string, dir bool) (string, bool) {
	if dir {
		name = strings.TrimSuffix(name, "/")
	}
	if x.opts.Strip == "" {
		return name, true
	}
	switch {
	case name == x.opts.Strip && dir:
		return "", false // the root of a stripped archive is dst itself
	case strings.HasPrefix(name, x.opts.Strip+"/"):
		return name[len(x.opts.Strip)+1:], true
	}
	return name, false
}

// dataSize is the size of the data a member carries in the stream: header
// only types carry none, whatever their header says.
func dataSize(hdr *tar.Header) int64 {
	switch hdr.Typeflag {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return 0
	}
	return hdr.Size
}

func splitPath(name string) (parent []string, base string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return nil, name
	}
	return strings.Split(name[:i], "/"), name[i+1:]
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

var errHeaderBudget = errors.New("safetar: extended headers over the limit")

// countingReader counts the stream's bytes. While a header is read it
// enforces the header budget and keeps the first two blocks at the header's
// offset and the last whole block, to tell a proper end from a truncation.
type countingReader struct {
	r      io.Reader
	n      int64
	header bool
	start  int64 // the 512-aligned offset the header area begins at
	limit  int64 // while header: no reading past this offset
	head   [1024]byte
	blk    [512]byte // the block being filled (at aligned offsets)
	last   [512]byte // the last whole block read while header
	hasBlk bool
}

func (c *countingReader) beginHeader(maxHeader int) {
	c.header = true
	c.start = (c.n + 511) &^ 511
	c.hasBlk = false
	// The header block, the blocks of a pax header and of a GNU long name
	// (or the two zero blocks of the end), and the extended data.
	c.limit = c.start + 4*512 + (int64(maxHeader)+511)&^511
}

func (c *countingReader) endHeader() { c.header = false }

func (c *countingReader) Read(p []byte) (int, error) {
	if c.header {
		if c.n >= c.limit {
			return 0, errHeaderBudget
		}
		if room := c.limit - c.n; int64(len(p)) > room {
			p = p[:room]
		}
	}
	n, err := c.r.Read(p)
	if c.header {
		for i := range n {
			off := c.n + int64(i)
			if off >= c.start && off < c.start+1024 {
				c.head[off-c.start] = p[i]
			}
			if off >= c.start {
				c.blk[off%512] = p[i]
				if off%512 == 511 {
					c.last = c.blk
					c.hasBlk = true
				}
			}
		}
	}
	c.n += int64(n)
	return n, err
}

// tail returns how many bytes were read from the header area's start, and
// its first two blocks (as far as read).
func (c *countingReader) tail() (n int64, first, second []byte) {
	n = c.n - c.start
	got := min(max(n, 0), 1024)
	first = c.head[:min(got, 512)]
	if got > 512 {
		second = c.head[512:got]
	}
	return n, first, second
}

func (c *countingReader) lastBlock() ([]byte, bool) { return c.last[:], c.hasBlk }

func isZero(b []byte) bool {
	if len(b) < 512 {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// checksumOK reports whether a header block's checksum field matches its
// bytes (the unsigned or the signed sum, as tar readers accept both).
func checksumOK(b []byte) bool {
	field := strings.Trim(string(b[148:156]), " \x00")
	var want int64
	if field == "" {
		return false
	}
	for _, c := range field {
		if c < '0' || c > '7' {
			return false
		}
		want = want*8 + int64(c-'0')
	}
	var u, s int64
	for i, c := range b {
		if i >= 148 && i < 156 {
			c = ' '
		}
		u += int64(c)
		s += int64(int8(c))
	}
	return want == u || want == s
}
