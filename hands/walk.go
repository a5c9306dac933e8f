package hands

import (
	"context"
	"path"

	"github.com/boxfs/boxfs/providers"
)

// filesWalker walks a tree with ReadDir, for a box that serves Files but no
// Walker of its own.
type filesWalker struct{ f providers.Files }

// Walk lists root's tree one ReadDir per directory.
func (w filesWalker) Walk(ctx context.Context, root string) ([]providers.FileInfo, error) {
	var out []providers.FileInfo
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		ents, err := w.f.ReadDir(ctx, dir)
		if err != nil {
			return err
		}
		for _, fi := range ents {
			full := path.Join(dir, fi.Name)
			if rel != "" {
				fi.Name = rel + "/" + fi.Name
			}
			if fi.IsSymlink() && fi.Target == "" {
				if fi.Target, err = w.f.Readlink(ctx, full); err != nil {
					return err
				}
			}
			out = append(out, fi)
			if fi.IsDir() {
				if err := walk(full, fi.Name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	sortTree(out)
	return out, nil
}
