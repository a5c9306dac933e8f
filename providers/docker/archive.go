package docker

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"path"
	"sync"

	"github.com/docker/docker/api/types/container"

	"github.com/boxfs/boxfs/providers"
)

var (
	_ providers.Archiver   = (*Box)(nil)
	_ providers.PathStater = (*Box)(nil)
)

// PutArchive extracts a tar stream into the box directory dir (which must
// exist) through Docker's archive API. Every entry becomes owned by the
// box's user (root unless the spec set one), whatever the tar says. A
// malformed tar is Invalid.
func (b *Box) PutArchive(ctx context.Context, dir string, r io.Reader) error {
	const op = "docker.PutArchive"
	if err := b.gone(op); err != nil {
		return err
	}
	if !path.IsAbs(dir) {
		return providers.Errorf(providers.Invalid, op, "dir %q is not absolute", dir).WithBox(b.id)
	}
	uid, gid, _ := providers.ParseUser(b.labels[labelUser])
	pr, pw := io.Pipe()
	var (
		wg      sync.WaitGroup
		tarErr  error
		errOnce sync.Once
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := chownTar(pw, r, uid, gid)
		if err != nil {
			errOnce.Do(func() { tarErr = err })
		}
		pw.CloseWithError(err)
	}()
	err := b.p.cli.CopyToContainer(ctx, b.id, dir, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(errors.New("copy ended")) // unblock the rewriter if the engine stopped reading
	wg.Wait()
	if tarErr != nil {
		return providers.E(providers.Invalid, op, tarErr).WithBox(b.id).WithPath(dir)
	}
	if err != nil {
		return b.pathError(ctx, op, dir, err)
	}
	return nil
}

// chownTar copies a tar stream, setting every entry's owner to uid:gid.
func chownTar(w io.Writer, r io.Reader, uid, gid int) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = uid, gid, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// GetArchive returns a tar of path (a file or a directory) from Docker's
// archive API; member names start with path's base name. A missing path is
// NotFound. The stream is the box's: treat it as untrusted.
func (b *Box) GetArchive(ctx context.Context, p string) (io.ReadCloser, error) {
	const op = "docker.GetArchive"
	if err := b.gone(op); err != nil {
		return nil, err
	}
	if !path.IsAbs(p) {
		return nil, providers.Errorf(providers.Invalid, op, "path %q is not absolute", p).WithBox(b.id)
	}
	rc, _, err := b.p.cli.CopyFromContainer(ctx, b.id, p)
	if err != nil {
		return nil, b.pathError(ctx, op, p, err)
	}
	return rc, nil
}

// StatPath stats one box path through Docker's stat-path API, without a
// command. It does not follow a final symlink; Target is then the link's
// target resolved to an absolute path in the box (Docker's answer), not the
// raw link text. Owner, inode and times other than mtime are not reported.
func (b *Box) StatPath(ctx context.Context, p string) (providers.FileInfo, error) {
	const op = "docker.StatPath"
	if err := b.gone(op); err != nil {
		return providers.FileInfo{}, err
	}
	if !path.IsAbs(p) {
		return providers.FileInfo{}, providers.Errorf(providers.Invalid, op, "path %q is not absolute", p).WithBox(b.id)
	}
	st, err := b.p.cli.ContainerStatPath(ctx, b.id, p)
	if err != nil {
		return providers.FileInfo{}, b.pathError(ctx, op, p, err)
	}
	return providers.FileInfo{Name: st.Name, Mode: st.Mode, Size: st.Size, Mtime: st.Mtime, Target: st.LinkTarget}, nil
}

// pathError classifies an archive API failure on path. Docker answers 404
// both for a missing path and for a missing container: ask which.
func (b *Box) pathError(ctx context.Context, op, p string, err error) error {
	e := wrap(op, b.id, err).WithPath(p)
	if e.Code == providers.NotFound {
		if _, ierr := b.p.cli.ContainerInspect(ctx, b.id); ierr != nil && errorCode(ierr) == providers.NotFound {
			e.Code = providers.Gone
		}
	}
	return e
}
