package hands

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path"
	"time"

	"github.com/boxfs/boxfs/providers"
)

// Large files move through the box's bulk path where it has one: its
// provider's archive API (Docker's copies run at several times the speed
// of a stream over an exec), with the agent committing a written file (its
// attributes, then the rename over its name) in one round trip. Smaller
// files, and boxes without either, keep the file channel.

// bulkMin is the size from which a file takes the bulk path.
const bulkMin = 8 << 20

var (
	_ providers.SizedReader = (*Hands)(nil)
	_ providers.HostReader  = (*Hands)(nil)
	_ providers.HostWriter  = (*Hands)(nil)
)

// HostFiles reports whether the box's files are the host's own.
func (h *Hands) HostFiles() bool {
	hw, ok := h.files.(providers.HostWriter)
	return ok && hw.HostFiles()
}

// OpenHostWrite opens name for writing as a host file, where the box's
// files are the host's own; elsewhere it is Unsupported.
func (h *Hands) OpenHostWrite(ctx context.Context, name string, flags int, perm providers.FileMode) (*os.File, providers.FileInfo, error) {
	if hw, ok := h.files.(providers.HostWriter); ok {
		return hw.OpenHostWrite(ctx, name, flags, perm)
	}
	return nil, providers.FileInfo{}, providers.Errorf(providers.Unsupported, "hands.OpenHostWrite", "the box's files are not the host's").WithBox(h.box.ID())
}

// OpenHost opens name for reading as a host file, where the box's files
// are the host's own; elsewhere it is Unsupported.
func (h *Hands) OpenHost(ctx context.Context, name string) (*os.File, error) {
	if hr, ok := h.files.(providers.HostReader); ok {
		return hr.OpenHost(ctx, name)
	}
	return nil, providers.Errorf(providers.Unsupported, "hands.OpenHost", "the box's files are not the host's").WithBox(h.box.ID())
}

// bulk returns the box's archive API when large files take it: the box has
// one of its own and the agent to commit writes.
func (h *Hands) bulk() (providers.Archiver, bool) {
	ar, ok := h.box.(providers.Archiver)
	return ar, ok && h.channel != nil
}

// ReadFileSized reads name, size bytes long as far as the caller knows:
// through the bulk path when it is large, else as ReadFile. A bulk read
// that cannot start falls back to ReadFile.
func (h *Hands) ReadFileSized(ctx context.Context, name string, size int64) (io.ReadCloser, error) {
	if ar, ok := h.bulk(); ok && size >= bulkMin {
		rc, err := readArchived(ctx, ar, name)
		if err == nil {
			return rc, nil
		}
		h.log.Debug("hands: bulk read did not start; reading through the file channel", "path", name, "err", err)
	}
	return h.ReadFile(ctx, name)
}

// readArchived returns the content of the regular file name from a tar of
// it.
func readArchived(ctx context.Context, ar providers.Archiver, name string) (io.ReadCloser, error) {
	const op = "hands.ReadFile"
	rc, err := ar.GetArchive(ctx, name)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil || hdr.Typeflag != tar.TypeReg || hdr.Name != path.Base(name) {
		rc.Close()
		return nil, providers.Errorf(providers.Unsupported, op, "the archive of %s is not one regular file", name)
	}
	return archivedFile{tr, rc}, nil
}

// archivedFile reads one member of an archive and closes the archive.
type archivedFile struct {
	io.Reader
	c io.Closer
}

func (a archivedFile) Close() error { return a.c.Close() }

// sizeOf is the bytes left in r when it is a file at its start (what the
// cache pushes), else false.
func sizeOf(r io.Reader) (int64, bool) {
	f, ok := r.(*os.File)
	if !ok {
		return 0, false
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil || off != 0 {
		return 0, false
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return 0, false
	}
	return st.Size(), true
}

// writeBulk puts r's size bytes beside name through the archive API and
// has the agent commit them over name with o's attributes. retry says
// that nothing reached name and r is at its start again: the caller may
// write it another way.
func (h *Hands) writeBulk(ctx context.Context, ar providers.Archiver, name string, r *os.File, size int64, o providers.WriteOptions) (fi providers.FileInfo, retry bool, err error) {
	dir := path.Dir(name)
	tmp := path.Join(dir, ".boxfs-tmp-"+providers.NewID(8))
	pr, pw := io.Pipe()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: path.Base(tmp), Size: size, Mode: 0o600, ModTime: time.Now(), Format: tar.FormatPAX})
		if err == nil {
			_, err = io.CopyN(tw, r, size)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	perr := ar.PutArchive(ctx, dir, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	<-sent // r is ours again
	if perr != nil {
		h.channel.Remove(ctx, tmp) // what was extracted of it
		_, serr := r.Seek(0, io.SeekStart)
		return providers.FileInfo{}, serr == nil, perr
	}
	fi, err = h.channel.Commit(ctx, name, tmp, o)
	if err != nil && !providers.IsCode(err, providers.Exists) {
		_, serr := r.Seek(0, io.SeekStart)
		return fi, serr == nil && !providers.IsCode(err, providers.OutcomeUnknown), err
	}
	return fi, false, err
}
