package providers

import (
	"context"
	"io"
)

// AsStatWriter returns f's own StatWriter when it has one, else one that
// makes each call of f in turn: the mutation, then each attribute asked
// for, then Lstat (so there the attributes follow the content, where a
// StatWriter of its own sets them before the new content takes the name).
func AsStatWriter(f Files) StatWriter {
	if sw, ok := f.(StatWriter); ok {
		return sw
	}
	return stepWriter{f}
}

type stepWriter struct{ f Files }

func (s stepWriter) CreateStat(ctx context.Context, name string, perm FileMode, exclusive bool) (FileInfo, error) {
	if err := s.f.Create(ctx, name, perm, exclusive); err != nil {
		return FileInfo{}, err
	}
	return s.f.Lstat(ctx, name)
}

func (s stepWriter) MkdirStat(ctx context.Context, name string, perm FileMode) (FileInfo, error) {
	if err := s.f.Mkdir(ctx, name, perm); err != nil {
		return FileInfo{}, err
	}
	return s.f.Lstat(ctx, name)
}

func (s stepWriter) WriteFileStat(ctx context.Context, name string, r io.Reader, o WriteOptions) (FileInfo, error) {
	if o.Exclusive {
		// The name is taken first, empty; the content replaces it.
		if err := s.f.Create(ctx, name, o.Perm, true); err != nil {
			return FileInfo{}, err
		}
	}
	if err := s.f.WriteFile(ctx, name, r, o.Perm); err != nil {
		return FileInfo{}, err
	}
	return SetAttrs(ctx, s.f, name, o)
}

// WriteDir does over f what a BatchWriter does with a directory entry fw:
// makes it when fw.Make and it is missing (an existing directory is
// fine), gives it fw.Options' attributes, and returns Lstat of it.
func WriteDir(ctx context.Context, f Files, fw FileWrite) (FileInfo, error) {
	if fw.Make {
		err := f.Mkdir(ctx, fw.Name, fw.Options.Perm)
		if err != nil && !IsCode(err, Exists) {
			return FileInfo{}, err
		}
		if err != nil {
			fi, lerr := f.Lstat(ctx, fw.Name)
			if lerr != nil {
				return FileInfo{}, lerr
			}
			if !fi.IsDir() {
				return FileInfo{}, err
			}
		}
	}
	return SetAttrs(ctx, f, fw.Name, fw.Options)
}

// SetAttrs gives name the attributes o asks a write to set (owner, then
// mode when ForceMode, then times), one call of f each, and returns Lstat
// of it: what a write that cannot set them itself does after writing.
func SetAttrs(ctx context.Context, f Files, name string, o WriteOptions) (FileInfo, error) {
	if o.Chown {
		if err := f.Chown(ctx, name, o.UID, o.GID); err != nil {
			return FileInfo{}, err
		}
	}
	if o.ForceMode {
		if err := f.Chmod(ctx, name, o.Perm); err != nil {
			return FileInfo{}, err
		}
	}
	if !o.Atime.IsZero() || !o.Mtime.IsZero() {
		if err := f.Utimes(ctx, name, o.Atime, o.Mtime); err != nil {
			return FileInfo{}, err
		}
	}
	return f.Lstat(ctx, name)
}
